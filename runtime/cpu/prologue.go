package cpu

import (
	"sync"

	"ppc.dev/ppc/ir"
	k "ppc.dev/ppc/kernels/cpu"
	"ppc.dev/ppc/runtime/device"
)

// A prologue (device.Spec.Pre: an op whose result is the next op's operand 0, which lower
// makes of an inference batch norm, and the ReLU after it, before a pointwise convolution)
// runs inside the convolution: its GEMM applies the batch norm's per-channel scale and shift
// and the ReLU to each panel of the input as it packs it (kernels/cpu.ConvPre), with
// BatchNormInference's multipliers and roundings, so the bits are those of the two launches
// — without the pass that wrote the whole normalised input and the read of it back. Any
// other prologue runs as its own kernel into a buffer of the launch site's, then the op
// (device.PreparePrologue).

func (d *Device) preparePrologue(s *device.Spec) (device.Impl, error) {
	pre, op, err := s.SplitPrologue()
	if err != nil {
		return nil, err
	}
	if impl := d.batchNormConv(pre, op); impl != nil {
		return impl, nil
	}
	return device.PreparePrologue(d.Prepare, func(t ir.Type) (device.Tensor, error) {
		return device.Tensor{Type: t, Data: device.HostBytes(t.Bytes())}, nil
	}, s)
}

// batchNormConv is the fused launch of a batch norm prologue (with a ReLU epilogue, or none)
// and a pointwise convolution (with an epilogue it applies itself, or none) of one float
// type, else nil.
func (d *Device) batchNormConv(pre, op *device.Spec) device.Impl {
	if pre.Op.Name != "batch_norm" || op.Op.Name != "conv" || len(pre.In) != 5 {
		return nil
	}
	relu := false
	if pre.Epilogue() {
		st := pre.Fused
		if len(st) != 1 || st[0].Op.Name != "relu" || len(st[0].Args) != 1 || st[0].Args[0] != 0 || pre.OpInputs != len(pre.In) || len(pre.Outputs) > 0 {
			return nil
		}
		relu = true
	}
	dt := pre.Out[0].DType
	if dt != ir.F32 && dt != ir.F64 {
		return nil
	}
	for _, t := range pre.In {
		if t.DType != dt {
			return nil
		}
	}
	if _, err := prepareBatchNorm(&device.Spec{Op: pre.Op, Attrs: pre.Attrs, In: pre.In, Out: pre.Out}); err != nil {
		return nil
	}
	conv, chain := op, (*device.Spec)(nil)
	if op.Epilogue() {
		conv, chain = op.SplitEpilogue()
	}
	p, bias, cdt, err := convSetup(conv)
	if err != nil || cdt != dt || !p.Pointwise() {
		return nil
	}
	var steps []chainStep
	if chain != nil {
		if steps = epilogueSteps(chain); steps == nil {
			return nil
		}
	}
	constW := len(conv.Const) >= 2 && conv.Const[1]
	eps := pre.Attrs.Float("eps", 1e-5)
	c := p.InC
	nIn := 0
	if chain != nil {
		nIn = len(chain.In)
	}
	if dt == ir.F64 {
		var run convEpiRunner[float64]
		if chain != nil {
			run = convEpilogue[float64](steps, nIn)
		}
		return batchNormConvImpl(convRunner(d, p, bias, constW, run), c, eps, relu)
	}
	var run convEpiRunner[float32]
	if chain != nil {
		run = convEpilogue[float32](steps, nIn)
	}
	return batchNormConvImpl(convRunner(d, p, bias, constW, run), c, eps, relu)
}

// batchNormConvImpl runs conv on the launch's operands after the batch norm's four
// parameters (x, then the convolution's own), under the batch norm's ConvPre.
func batchNormConvImpl[T k.Float](conv convRun[T], c int, eps float64, relu bool) device.Impl {
	coeffs := sync.Pool{New: func() any { b := make([]T, 2*c); return &b }}
	return func(in, out []device.Tensor) error {
		bp := coeffs.Get().(*[]T)
		defer coeffs.Put(bp)
		buf := *bp
		pre := k.BatchNormPre(floats[T](in[1]), floats[T](in[2]), floats[T](in[3]), floats[T](in[4]), T(eps), relu, buf[:c], buf[c:])
		var short [8]device.Tensor
		ops := append(append(short[:0], in[0]), in[5:]...)
		return conv(ops, out, pre)
	}
}
