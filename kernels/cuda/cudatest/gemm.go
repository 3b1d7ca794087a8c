package cudatest

import (
	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/kernels/cuda"
	"ppc.dev/ppc/runtime/device"
)

// Gemm runs one GemmCall with cuBLASLt's column-major semantics on host tensors, in float64,
// rounding each result once to d's dtype: a is cuBLASLt's A (the IR's second operand), b its
// B (the IR's first).
func Gemm(c cuda.GemmCall, a, b, bias, d device.Tensor) {
	A, B, Bias := getter(a), getter(b), getter(bias)
	// op(A) as M rows of K and op(B) as N columns of K, dense: the sums run over contiguous
	// memory, in k order.
	am, bm := make([]float64, c.M*c.K), make([]float64, c.N*c.K)
	for bt := int64(0); bt < c.Batch; bt++ {
		pa, pb, pd := c.OffA+bt*c.StrideA, c.OffB+bt*c.StrideB, c.OffC+bt*c.StrideC
		for i := int64(0); i < c.M; i++ {
			for k := int64(0); k < c.K; k++ {
				if c.TransA {
					am[i*c.K+k] = A(pa + k + i*c.LDA)
				} else {
					am[i*c.K+k] = A(pa + i + k*c.LDA)
				}
			}
		}
		for j := int64(0); j < c.N; j++ {
			for k := int64(0); k < c.K; k++ {
				if c.TransB {
					bm[j*c.K+k] = B(pb + j + k*c.LDB)
				} else {
					bm[j*c.K+k] = B(pb + k + j*c.LDB)
				}
			}
		}
		for j := int64(0); j < c.N; j++ {
			col := bm[j*c.K : (j+1)*c.K]
			for i := int64(0); i < c.M; i++ {
				row := am[i*c.K : (i+1)*c.K]
				sum := 0.0
				for k, x := range row {
					sum += x * col[k]
				}
				if c.Bias {
					sum += Bias(i)
				}
				SetFloat(d, int(pd+i+j*c.LDC), sum)
			}
		}
	}
}

// getter reads a float tensor's elements as float64, with the dtype switch made once.
func getter(t device.Tensor) func(i int64) float64 {
	switch t.Type.DType {
	case ir.F32:
		x := t.F32()
		return func(i int64) float64 { return float64(x[i]) }
	case ir.F64:
		x := t.F64()
		return func(i int64) float64 { return x[i] }
	}
	return func(i int64) float64 { return t.Float(int(i)) }
}
