package cpu

import (
	"errors"
	"fmt"
)

// ConvTransposeParams describes an N-d transposed convolution (ONNX ConvTranspose) on
// NC(D)HW tensors: x is [Batch, InC, Spatial...], w is [InC, OutC/Groups, Kernel...],
// bias is [OutC] and y is [Batch, OutC, OutSpatial...], with
//
//	out[i] = Stride[i]·(Spatial[i]-1) + OutputPadding[i] + Dilation[i]·(Kernel[i]-1) + 1 - PadBegin[i] - PadEnd[i]
//
// ConvTranspose is the adjoint (data gradient) of the Conv that maps y's shape to x's with
// the same kernel, strides, dilations and pads, and it is computed that way. An explicit
// ONNX output_shape is the caller's to turn into pads. Init validates, defaults nil
// Stride/Dilation to 1, nil pads/OutputPadding to 0 and Groups 0 to 1, and computes
// OutSpatial.
type ConvTransposeParams struct {
	Batch, InC, OutC, Groups int
	Spatial                  []int
	Kernel, Stride, Dilation []int
	PadBegin, PadEnd         []int
	OutputPadding            []int
	OutSpatial               []int // computed by Init

	g convGeom // the associated convolution: input y's shape, output x's shape
}

// Init validates the parameters and computes OutSpatial.
func (p *ConvTransposeParams) Init() error {
	rank := len(p.Spatial)
	if rank == 0 {
		return errors.New("convtranspose: no spatial dimensions")
	}
	if len(p.Kernel) != rank {
		return fmt.Errorf("convtranspose: Kernel has %d entries, want %d", len(p.Kernel), rank)
	}
	var err error
	for _, f := range []struct {
		v    *[]int
		def  int
		name string
	}{{&p.Stride, 1, "Stride"}, {&p.Dilation, 1, "Dilation"}, {&p.PadBegin, 0, "PadBegin"}, {&p.PadEnd, 0, "PadEnd"}, {&p.OutputPadding, 0, "OutputPadding"}} {
		if *f.v, err = defaultInts(*f.v, rank, f.def, "convtranspose: "+f.name); err != nil {
			return err
		}
	}
	if p.Groups == 0 {
		p.Groups = 1
	}
	out := make([]int, rank)
	for i := 0; i < rank; i++ {
		if p.Spatial[i] < 1 || p.Kernel[i] < 1 || p.Stride[i] < 1 || p.Dilation[i] < 1 {
			return fmt.Errorf("convtranspose: axis %d: spatial %d, kernel %d, stride %d, dilation %d must all be ≥ 1", i, p.Spatial[i], p.Kernel[i], p.Stride[i], p.Dilation[i])
		}
		if p.PadBegin[i] < 0 || p.PadEnd[i] < 0 || p.OutputPadding[i] < 0 {
			return fmt.Errorf("convtranspose: axis %d: negative padding", i)
		}
		out[i] = p.Stride[i]*(p.Spatial[i]-1) + p.OutputPadding[i] + p.Dilation[i]*(p.Kernel[i]-1) + 1 - p.PadBegin[i] - p.PadEnd[i]
		if out[i] < 1 {
			return fmt.Errorf("convtranspose: axis %d: output size %d < 1 (pads too large)", i, out[i])
		}
	}
	p.OutSpatial = out
	// In the associated Conv, y (OutC channels) is the input and x (InC) the output, and
	// ConvTranspose's weight [InC, OutC/G, k...] is exactly that Conv's [out, in/G, k...].
	return p.g.setup(p.Batch, p.OutC, p.InC, p.Groups, out, p.Spatial, p.Kernel, p.Stride, p.Dilation, p.PadBegin)
}

// XLen, WLen and YLen are the element counts ConvTranspose requires of x, w and y.
func (p *ConvTransposeParams) XLen() int { return p.Batch * p.InC * p.g.outSize }
func (p *ConvTransposeParams) WLen() int { return p.InC * p.g.kdim }
func (p *ConvTransposeParams) YLen() int { return p.Batch * p.OutC * p.g.inSize }

func (p *ConvTransposeParams) check(op string, x, w, y int) {
	p.g.mustInit(op)
	needLen(op, "x", x, p.XLen())
	needLen(op, "w", w, p.WLen())
	needLen(op, "y", y, p.YLen())
}

// ConvTranspose computes y = convᵀ(x, w) + bias (ONNX ConvTranspose); bias may be nil.
// Scratch: one column matrix per worker, pooled.
//
// Preconditions (panics otherwise): p.Init succeeded; len(x) ≥ XLen(), len(w) ≥ WLen(),
// len(y) ≥ YLen(), bias nil or len(bias) ≥ OutC; y does not overlap x or w.
func ConvTranspose[T Float](p *ConvTransposeParams, x, w, bias, y []T) {
	p.check("ConvTranspose", len(x), len(w), len(y))
	convBackwardData(&p.g, x, w, y)
	if bias != nil {
		needLen("ConvTranspose", "bias", len(bias), p.OutC)
		plane := p.g.inSize
		Parallel(p.Batch*p.OutC, max(1, 4096/plane), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				bv := bias[i%p.OutC]
				yp := y[i*plane : (i+1)*plane]
				for j := range yp {
					yp[j] += bv
				}
			}
		})
	}
}

// ConvTransposeBackwardData computes dx (shaped like x) from dy (shaped like y): the
// forward Conv of dy with w. dx is overwritten.
func ConvTransposeBackwardData[T Float](p *ConvTransposeParams, dy, w, dx []T) {
	p.check("ConvTransposeBackwardData", len(dx), len(w), len(dy))
	convForward[T](&p.g, dy, nil, w, nil, nil, dx, Epilogue[T]{})
}

// ConvTransposeBackwardFilter computes dw (shaped like w) from x and dy, summed over the
// batch, and, if db is non-nil, the bias gradient db ([OutC]). Both are overwritten.
func ConvTransposeBackwardFilter[T Float](p *ConvTransposeParams, x, dy, dw, db []T) {
	p.check("ConvTransposeBackwardFilter", len(x), len(dw), len(dy))
	// In the associated Conv, dy is the input and x the output gradient.
	convBackwardFilter(&p.g, dy, x, dw)
	if db != nil {
		needLen("ConvTransposeBackwardFilter", "db", len(db), p.OutC)
		ConvBiasGrad(dy, p.Batch, p.OutC, p.g.inSize, db)
	}
}
