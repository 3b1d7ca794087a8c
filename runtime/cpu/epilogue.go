package cpu

import (
	"sync"

	"ppc.dev/ppc/ir"
	k "ppc.dev/ppc/kernels/cpu"
	"ppc.dev/ppc/runtime/device"
)

// An epilogue (device.Spec.Epilogue: an op followed by an elementwise chain, which lower
// makes of a convolution and the ReLU, or residual add and ReLU, after it) runs inside the
// convolution where its chain is made of chainOps in the result's dtype: the convolution
// calls it on each block of output channels as soon as the block is final — while the block
// is still in cache — instead of a second launch reading and writing every element again.
// The steps are the arithmetic chain's (chainOp), in the same order on the same values, so
// the bits are those of the two launches. A convolution's lone ReLU goes to the kernel as
// k.Epilogue.Relu, and a residual add and ReLU (ResNet's, after a block's last convolution)
// as k.Epilogue.Res and Relu, which a pointwise convolution applies in its GEMM's
// micro-kernel store. Any other epilogue runs as its op and then its chain in place
// (device.PrepareEpilogue).

// prepareEpilogue prepares an epilogue launch site.
func (d *Device) prepareEpilogue(s *device.Spec) (device.Impl, error) {
	op, chain := s.SplitEpilogue()
	if build := epilogueBuilders[op.Op.Name]; build != nil {
		if steps := epilogueSteps(chain); steps != nil {
			if impl, err := build(d, op, steps, len(chain.In)); err == nil {
				return impl, nil
			}
		}
	}
	return device.PrepareEpilogue(d.Prepare, s)
}

// epilogueBuilders are the ops whose kernel applies an epilogue itself, given its steps and
// how many inputs its chain reads; an error sends the launch site to the two-launch form.
var epilogueBuilders = map[string]func(d *Device, op *device.Spec, steps []chainStep, nIn int) (device.Impl, error){
	// a convolution, to each block of output channels as the block is final
	"conv": func(d *Device, op *device.Spec, steps []chainStep, nIn int) (device.Impl, error) {
		p, bias, dt, err := convSetup(op)
		if err != nil {
			return nil, err
		}
		constW := len(op.Const) >= 2 && op.Const[1]
		return byDType(dt, convImpl(d, p, bias, constW, convEpilogue[float32](steps, nIn)),
			convImpl(d, p, bias, constW, convEpilogue[float64](steps, nIn))), nil
	},
	// batch norm (inference), to each plane as the plane is written
	"batch_norm": func(_ *Device, op *device.Spec, steps []chainStep, nIn int) (device.Impl, error) {
		if _, err := prepareBatchNorm(op); err != nil {
			return nil, err
		}
		n, c, sp := channelGeometry(op.In[0])
		eps := op.Attrs.Float("eps", 1e-5)
		if loneRelu(steps, nIn) { // the scale-shift-ReLU pass
			return byDType(op.Out[0].DType, batchNormReluImpl[float32](n, c, sp, eps), batchNormReluImpl[float64](n, c, sp, eps)), nil
		}
		return byDType(op.Out[0].DType, batchNormImpl(n, c, sp, eps, chainRunner[float32](steps, nIn)),
			batchNormImpl(n, c, sp, eps, chainRunner[float64](steps, nIn))), nil
	},
}

// epilogueSteps returns the chain's steps when it writes one result, f32 or f64, and each
// step is a chainOp on values of that type (a single-dtype chain over the result's
// elements), else nil.
func epilogueSteps(chain *device.Spec) []chainStep {
	t := chain.Out[0]
	if t.DType != ir.F32 && t.DType != ir.F64 || len(chain.Out) != 1 || len(chain.Outputs) > 1 {
		return nil
	}
	for _, in := range chain.In {
		if !in.Equal(t) {
			return nil
		}
	}
	return chainSteps(chain.Fused, len(chain.In), t)
}

// convEpiRunner makes a convolution launch's epilogue (k.Epilogue) on its result y and the
// chain's other inputs.
type convEpiRunner[T k.Float] func(y []T, extra []device.Tensor) k.Epilogue[T]

// convEpilogue is a convolution's epilogue from its chain: a lone ReLU as the kernel's Relu,
// which the pointwise GEMM applies in its micro-kernel's store (the bits of ReluRow after it;
// a pass over y after the GEMM cost ResNet-50's 1×1 layers 7% at two threads), a residual
// add and then a ReLU as Res and Relu, which it applies there too (the add is commutative,
// so the chain's operand order gives the same bits), anything else — or a residual that
// shares memory with y — as its Func, chainRunner's.
func convEpilogue[T k.Float](steps []chainStep, nIn int) convEpiRunner[T] {
	if loneRelu(steps, nIn) {
		return func([]T, []device.Tensor) k.Epilogue[T] { return k.Epilogue[T]{Relu: true} }
	}
	run := chainRunner[T](steps, nIn)
	if residualRelu(steps, nIn) {
		return func(y []T, extra []device.Tensor) k.Epilogue[T] {
			res := floats[T](extra[0])
			if k.Overlap(res, y) {
				return k.Epilogue[T]{Func: run(y, extra)}
			}
			return k.Epilogue[T]{Relu: true, Res: res}
		}
	}
	return func(y []T, extra []device.Tensor) k.Epilogue[T] { return k.Epilogue[T]{Func: run(y, extra)} }
}

// residualRelu reports whether a chain adds the op's result and one other input (of the
// result's shape: epilogueSteps) and then takes the sum's ReLU.
func residualRelu(steps []chainStep, nIn int) bool {
	return nIn == 2 && len(steps) == 2 && steps[0].op == "add" && len(steps[0].args) == 2 &&
		steps[0].args[0]+steps[0].args[1] == 1 && steps[1].op == "relu" && steps[1].args[0] == 2
}

// loneRelu reports whether a chain is a ReLU of the op's result alone, which the batch norm
// and convolution kernels apply themselves.
func loneRelu(steps []chainStep, nIn int) bool {
	return len(steps) == 1 && steps[0].op == "relu" && nIn == 1
}

// epiRunner makes a launch's epilogue: the chain over elements [lo, hi) of y (its input 0,
// rewritten with the last step's result) and of extra (its inputs 1, 2, …).
type epiRunner[T k.Float] func(y []T, extra []device.Tensor) func(lo, hi int)

func chainRunner[T k.Float](steps []chainStep, nIn int) epiRunner[T] {
	scratch := sync.Pool{New: func() any { return make([]T, chainChunk*len(steps)) }}
	return func(y []T, extra []device.Tensor) func(lo, hi int) {
		ins := make([][]T, nIn)
		ins[0] = y
		for i, t := range extra {
			ins[i+1] = floats[T](t)
		}
		return func(lo, hi int) {
			// Called per block of channels, or per plane (batch norm: 49 elements on a 7 × 7
			// map), so nothing here allocates: the value list sits on the stack when short,
			// and a single step (a ReLU) needs no scratch at all.
			var buf []T
			if len(steps) > 1 {
				buf = scratch.Get().([]T)
				defer scratch.Put(buf)
			}
			var short [8][]T
			vals := short[:0]
			if n := nIn + len(steps); n <= len(short) {
				vals = short[:n]
			} else {
				vals = make([][]T, n)
			}
			for c := lo; c < hi; c += chainChunk {
				n := min(chainChunk, hi-c)
				for i, in := range ins {
					vals[i] = in[c : c+n]
				}
				for j, st := range steps {
					var dst []T
					if j == len(steps)-1 {
						dst = y[c : c+n] // read (as input 0) by earlier steps only at these indices
					} else {
						dst = buf[j*chainChunk:][:n]
					}
					chainOp(st.op, dst, vals[st.args[0]], vals[st.args[len(st.args)-1]])
					vals[nIn+j] = dst
				}
			}
		}
	}
}
