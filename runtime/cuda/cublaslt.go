package cuda

import (
	"fmt"
	"unsafe"

	"ppc.dev/ppc/ir"
	kernels "ppc.dev/ppc/kernels/cuda"
)

// cuBLASLt's enum values (cublasLt.h, cublas_api.h, library_types.h), for the calls below.
const (
	ltDescComputeType                       = 0
	ltDescScaleType                         = 1
	ltDescTransA                            = 3
	ltDescTransB                            = 4
	ltDescEpilogue                          = 7
	ltDescBiasPointer                       = 8
	ltLayoutBatchCount                      = 5
	ltLayoutBatchStride                     = 6
	ltPrefMaxWorkspace                      = 1
	ltEpilogueDefault                       = 1
	ltEpilogueBias                          = 4
	cublasOpN, cublasOpT                    = 0, 1
	cudaR32F, cudaR64F, cudaR16F, cudaR16BF = 0, 1, 2, 14
)

var computeTypes = map[string]int32{"CUBLAS_COMPUTE_32F": 68, "CUBLAS_COMPUTE_32F_FAST_TF32": 77, "CUBLAS_COMPUTE_64F": 70}

func cudaDataType(d ir.DType) (int32, error) {
	switch d {
	case ir.F32:
		return cudaR32F, nil
	case ir.F64:
		return cudaR64F, nil
	case ir.F16:
		return cudaR16F, nil
	case ir.BF16:
		return cudaR16BF, nil
	}
	return 0, fmt.Errorf("no CUDA data type for %s", d)
}

// CublasLt is cuBLASLt's API as ppc calls it, bound through purego.
type CublasLt struct {
	lib            *Library
	create         func(h *uintptr) int32
	descCreate     func(d *uintptr, compute, scale int32) int32
	descSet        func(d uintptr, attr int32, buf unsafe.Pointer, size uint64) int32
	descDestroy    func(d uintptr) int32
	layoutCreate   func(l *uintptr, typ int32, rows, cols uint64, ld int64) int32
	layoutSet      func(l uintptr, attr int32, buf unsafe.Pointer, size uint64) int32
	layoutDestroy  func(l uintptr) int32
	prefCreate     func(p *uintptr) int32
	prefSet        func(p uintptr, attr int32, buf unsafe.Pointer, size uint64) int32
	prefDestroy    func(p uintptr) int32
	heuristic      func(h, desc, a, b, c, d, pref uintptr, requested int32, results unsafe.Pointer, returned *int32) int32
	matmul         func(h, desc uintptr, alpha unsafe.Pointer, a, adesc, b, bdesc uintptr, beta unsafe.Pointer, c, cdesc, d, ddesc uintptr, algo unsafe.Pointer, ws uintptr, wsSize uint64, stream uintptr) int32
	statusString   func(rc int32) string
	handle         uintptr
	WorkspaceBytes uint64
	// plans keeps each call's descriptors, layouts and algorithm: made once per distinct call
	// (a step repeats the same few hundred), not per launch.
	plans map[kernels.GemmCall]*ltPlan
}

// ltPlan is one kernels.GemmCall's cuBLASLt objects and the heuristic's algorithm.
type ltPlan struct {
	desc, la, lb, ld uintptr
	algo             [8]uint64
}

// heuristicResult is cublasLtMatmulHeuristicResult_t: the algorithm (64 bytes), its
// workspace size, its state, the waves count and reserved words.
type heuristicResult struct {
	algo      [8]uint64
	workspace uint64
	state     int32
	waves     float32
	reserved  [4]int32
}

// OpenCublasLt binds cuBLASLt's entry points and creates a handle.
func OpenCublasLt(l *Library) (*CublasLt, error) {
	if !l.Found() {
		return nil, fmt.Errorf("cuBLASLt is not available: %s", l.Err)
	}
	c := &CublasLt{lib: l}
	if err := l.bind([]binding{{&c.create, "cublasLtCreate"}, {&c.descCreate, "cublasLtMatmulDescCreate"}, {&c.descSet, "cublasLtMatmulDescSetAttribute"},
		{&c.descDestroy, "cublasLtMatmulDescDestroy"}, {&c.layoutCreate, "cublasLtMatrixLayoutCreate"}, {&c.layoutSet, "cublasLtMatrixLayoutSetAttribute"},
		{&c.layoutDestroy, "cublasLtMatrixLayoutDestroy"}, {&c.prefCreate, "cublasLtMatmulPreferenceCreate"}, {&c.prefSet, "cublasLtMatmulPreferenceSetAttribute"},
		{&c.prefDestroy, "cublasLtMatmulPreferenceDestroy"}, {&c.heuristic, "cublasLtMatmulAlgoGetHeuristic"}, {&c.matmul, "cublasLtMatmul"},
		{&c.statusString, "cublasLtGetStatusString"}}...); err != nil {
		return nil, err
	}
	if rc := c.create(&c.handle); rc != 0 {
		return nil, fmt.Errorf("cublasLtCreate: %s", c.statusString(rc))
	}
	return c, nil
}

// Matmul runs one planned call on device pointers a (cuBLASLt's A: the IR's second
// operand), b (the IR's first), d (the result) and bias, on stream, with workspace bytes at
// ws. alpha = 1, beta = 0: D is written, not accumulated into.
func (c *CublasLt) Matmul(g kernels.GemmCall, a, b, d, bias, ws, stream uintptr) error {
	p, err := c.plan(g)
	if err != nil {
		return err
	}
	if g.Bias { // the bias buffer is the launch's: its pointer is set per call
		if err := c.check("cublasLtMatmulDescSetAttribute(bias)", c.descSet(p.desc, ltDescBiasPointer, unsafe.Pointer(&bias), 8)); err != nil {
			return err
		}
	}
	alpha32, beta32 := float32(1), float32(0)
	alpha64, beta64 := float64(1), float64(0)
	alpha, beta := unsafe.Pointer(&alpha32), unsafe.Pointer(&beta32)
	if g.DType == ir.F64 {
		alpha, beta = unsafe.Pointer(&alpha64), unsafe.Pointer(&beta64)
	}
	size := uintptr(g.DType.Size())
	return c.check("cublasLtMatmul", c.matmul(c.handle, p.desc, alpha, a+uintptr(g.OffA)*size, p.la, b+uintptr(g.OffB)*size, p.lb, beta,
		d+uintptr(g.OffC)*size, p.ld, d+uintptr(g.OffC)*size, p.ld, unsafe.Pointer(&p.algo), ws, c.WorkspaceBytes, stream))
}

func (c *CublasLt) check(what string, rc int32) error {
	if rc != 0 {
		return fmt.Errorf("%s: %s", what, c.statusString(rc))
	}
	return nil
}

// plan makes (once) the call's descriptor, its layouts of A, B and D, and the algorithm the
// heuristic picks for the workspace limit.
func (c *CublasLt) plan(g kernels.GemmCall) (*ltPlan, error) {
	if p := c.plans[g]; p != nil {
		return p, nil
	}
	dt, err := cudaDataType(g.DType)
	if err != nil {
		return nil, err
	}
	compute, ok := computeTypes[g.Compute]
	if !ok {
		return nil, fmt.Errorf("compute type %q", g.Compute)
	}
	scale := int32(cudaR32F)
	if g.DType == ir.F64 {
		scale = cudaR64F
	}
	p := &ltPlan{}
	if err := c.check("cublasLtMatmulDescCreate", c.descCreate(&p.desc, compute, scale)); err != nil {
		return nil, err
	}
	op := func(t bool) int32 {
		if t {
			return cublasOpT
		}
		return cublasOpN
	}
	ta, tb := op(g.TransA), op(g.TransB)
	epi := uint32(ltEpilogueDefault)
	if g.Bias {
		epi = ltEpilogueBias
	}
	for _, s := range []struct {
		attr int32
		p    unsafe.Pointer
		n    uint64
	}{{ltDescTransA, unsafe.Pointer(&ta), 4}, {ltDescTransB, unsafe.Pointer(&tb), 4}, {ltDescEpilogue, unsafe.Pointer(&epi), 4}} {
		if err := c.check("cublasLtMatmulDescSetAttribute", c.descSet(p.desc, s.attr, s.p, s.n)); err != nil {
			return nil, err
		}
	}
	// The stored shapes: A is M×K, or K×M when transposed; B K×N or N×K; C and D M×N.
	rowsA, colsA := g.M, g.K
	if g.TransA {
		rowsA, colsA = g.K, g.M
	}
	rowsB, colsB := g.K, g.N
	if g.TransB {
		rowsB, colsB = g.N, g.K
	}
	layout := func(rows, cols, ld, stride int64) (uintptr, error) {
		var l uintptr
		if err := c.check("cublasLtMatrixLayoutCreate", c.layoutCreate(&l, dt, uint64(rows), uint64(cols), ld)); err != nil {
			return 0, err
		}
		if g.Batch > 1 {
			batch := int32(g.Batch)
			if err := c.check("cublasLtMatrixLayoutSetAttribute", c.layoutSet(l, ltLayoutBatchCount, unsafe.Pointer(&batch), 4)); err != nil {
				return 0, err
			}
			if err := c.check("cublasLtMatrixLayoutSetAttribute", c.layoutSet(l, ltLayoutBatchStride, unsafe.Pointer(&stride), 8)); err != nil {
				return 0, err
			}
		}
		return l, nil
	}
	if p.la, err = layout(rowsA, colsA, g.LDA, g.StrideA); err != nil {
		return nil, err
	}
	if p.lb, err = layout(rowsB, colsB, g.LDB, g.StrideB); err != nil {
		return nil, err
	}
	if p.ld, err = layout(g.M, g.N, g.LDC, g.StrideC); err != nil {
		return nil, err
	}
	var pref uintptr
	if err := c.check("cublasLtMatmulPreferenceCreate", c.prefCreate(&pref)); err != nil {
		return nil, err
	}
	defer c.prefDestroy(pref)
	wsBytes := c.WorkspaceBytes
	if err := c.check("cublasLtMatmulPreferenceSetAttribute", c.prefSet(pref, ltPrefMaxWorkspace, unsafe.Pointer(&wsBytes), 8)); err != nil {
		return nil, err
	}
	var res heuristicResult
	var n int32
	if err := c.check("cublasLtMatmulAlgoGetHeuristic", c.heuristic(c.handle, p.desc, p.la, p.lb, p.ld, p.ld, pref, 1, unsafe.Pointer(&res), &n)); err != nil {
		return nil, err
	}
	if n < 1 {
		return nil, fmt.Errorf("cuBLASLt has no algorithm for %+v", g)
	}
	p.algo = res.algo
	if c.plans == nil {
		c.plans = map[kernels.GemmCall]*ltPlan{}
	}
	c.plans[g] = p
	return p, nil
}

// Close destroys the plans' descriptors and layouts.
func (c *CublasLt) Close() {
	for _, p := range c.plans {
		c.layoutDestroy(p.la)
		c.layoutDestroy(p.lb)
		c.layoutDestroy(p.ld)
		c.descDestroy(p.desc)
	}
	c.plans = nil
}

// Workspace is WorkspaceBytes (Blas).
func (c *CublasLt) Workspace() uint64 { return c.WorkspaceBytes }

var _ Blas = (*CublasLt)(nil)
