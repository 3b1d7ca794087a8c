package cpu

import (
	"fmt"
	"math"
)

// Batch normalisation on [n, c, spatial] tensors (NC followed by any spatial dims
// flattened), per channel c. Statistics are accumulated in float64 so that float32
// training with large n·spatial does not lose the mean in rounding.

type bnLen struct {
	name       string
	have, want int
}

func bnCheck(op string, n, c, spatial int, lens []bnLen) {
	if n < 0 || c < 0 || spatial < 0 {
		panic(fmt.Sprintf("cpu.%s: negative shape %d, %d, %d", op, n, c, spatial))
	}
	for _, l := range lens {
		needLen(op, l.name, l.have, l.want)
	}
}

// bnChannels runs f on every channel in parallel.
func bnChannels(n, c, spatial int, f func(ch int)) {
	Parallel(c, max(1, 8192/max(1, n*spatial)), func(lo, hi int) {
		for ch := lo; ch < hi; ch++ {
			f(ch)
		}
	})
}

// BatchNormInference computes y = scale·(x − mean)/√(variance + eps) + bias per channel
// (ONNX BatchNormalization, inference mode). x and y are [n, c, spatial]; scale, bias,
// mean and variance are [c]. y may alias x. epi, if not nil, is called on each plane's range
// of y once the plane is written (ConvEpi's contract: the ReLU lowering fuses after it).
func BatchNormInference[T Float](x, scale, bias, mean, variance []T, eps T, n, c, spatial int, y []T, epi func(lo, hi int)) {
	batchNormInference("BatchNormInference", x, scale, bias, mean, variance, eps, n, c, spatial, y, epi, false)
}

// BatchNormReluInference is BatchNormInference followed by a ReLU (x if x > 0, else 0) in
// one pass over each plane — the bits of the two, without writing and reading every plane
// again (a pre-activation network's batch norm and ReLU: DenseNet's 62).
func BatchNormReluInference[T Float](x, scale, bias, mean, variance []T, eps T, n, c, spatial int, y []T) {
	batchNormInference("BatchNormReluInference", x, scale, bias, mean, variance, eps, n, c, spatial, y, nil, true)
}

func batchNormInference[T Float](op string, x, scale, bias, mean, variance []T, eps T, n, c, spatial int, y []T, epi func(lo, hi int), relu bool) {
	bnCheck(op, n, c, spatial, []bnLen{
		{"x", len(x), n * c * spatial}, {"y", len(y), n * c * spatial}, {"scale", len(scale), c},
		{"bias", len(bias), c}, {"mean", len(mean), c}, {"variance", len(variance), c}})
	bnChannels(n, c, spatial, func(ch int) {
		mul, add := bnCoeffs(scale[ch], bias[ch], mean[ch], variance[ch], eps)
		for b := 0; b < n; b++ {
			off := (b*c + ch) * spatial
			if relu {
				scaleShiftReluRow(x[off:off+spatial], y[off:off+spatial], mul, add)
				continue
			}
			scaleShiftRow(x[off:off+spatial], y[off:off+spatial], mul, add)
			if epi != nil {
				epi(off, off+spatial)
			}
		}
	})
}

// bnCoeffs is an inference batch norm's channel as y = x·mul + add.
func bnCoeffs[T Float](scale, bias, mean, variance, eps T) (mul, add T) {
	a := float64(scale) / math.Sqrt(float64(variance)+float64(eps))
	return T(a), T(float64(bias) - a*float64(mean))
}

// BatchNormPre is the ConvPre of an inference batch norm (and a ReLU after it, with relu):
// BatchNormInference's multipliers, in mul and add ([c] each), so that a pointwise
// convolution under it reads the bits BatchNormInference (BatchNormReluInference) writes.
func BatchNormPre[T Float](scale, bias, mean, variance []T, eps T, relu bool, mul, add []T) *ConvPre[T] {
	c := len(mul)
	bnCheck("BatchNormPre", 1, c, 0, []bnLen{{"add", len(add), c}, {"scale", len(scale), c},
		{"bias", len(bias), c}, {"mean", len(mean), c}, {"variance", len(variance), c}})
	for ch := range mul {
		mul[ch], add[ch] = bnCoeffs(scale[ch], bias[ch], mean[ch], variance[ch], eps)
	}
	return &ConvPre[T]{Mul: mul, Add: add, Relu: relu}
}

// bnStats returns the mean and biased (population) variance of one channel.
func bnStats[T Float](x []T, n, c, spatial, ch int) (mean, variance float64) {
	cnt := float64(n * spatial)
	if cnt == 0 {
		return 0, 0
	}
	var s float64
	for b := 0; b < n; b++ {
		off := (b*c + ch) * spatial
		for _, v := range x[off : off+spatial] {
			s += float64(v)
		}
	}
	mean = s / cnt
	// Two passes: Σ(x−mean)² is accurate where E[x²]−mean² would cancel.
	var q float64
	for b := 0; b < n; b++ {
		off := (b*c + ch) * spatial
		for _, v := range x[off : off+spatial] {
			d := float64(v) - mean
			q += d * d
		}
	}
	return mean, q / cnt
}

// BatchNormTraining normalises with the batch's own statistics (ONNX BatchNormalization
// with training_mode=1): y = scale·(x − μ)/√(σ² + eps) + bias, where μ and σ² are the
// per-channel mean and population variance over n and spatial. It writes μ to batchMean
// and σ² to batchVar ([c] each), which BatchNormBackward and BatchNormRunningUpdate take.
// y may alias x.
func BatchNormTraining[T Float](x, scale, bias []T, eps T, n, c, spatial int, y, batchMean, batchVar []T) {
	bnCheck("BatchNormTraining", n, c, spatial, []bnLen{
		{"x", len(x), n * c * spatial}, {"y", len(y), n * c * spatial}, {"scale", len(scale), c},
		{"bias", len(bias), c}, {"batchMean", len(batchMean), c}, {"batchVar", len(batchVar), c}})
	bnChannels(n, c, spatial, func(ch int) {
		mean, variance := bnStats(x, n, c, spatial, ch)
		batchMean[ch], batchVar[ch] = T(mean), T(variance)
		a := float64(scale[ch]) / math.Sqrt(variance+float64(eps))
		mul, add := T(a), T(float64(bias[ch])-a*mean)
		for b := 0; b < n; b++ {
			off := (b*c + ch) * spatial
			scaleShiftRow(x[off:off+spatial], y[off:off+spatial], mul, add)
		}
	})
}

// BatchNormRunningUpdate folds a batch's statistics into the running estimates as ONNX
// does: running = running·momentum + batch·(1 − momentum), for mean and variance alike
// (ONNX uses the population variance here; PyTorch would use the unbiased one).
func BatchNormRunningUpdate[T Float](runningMean, runningVar, batchMean, batchVar []T, momentum T) {
	c := len(runningMean)
	needLen("BatchNormRunningUpdate", "runningVar", len(runningVar), c)
	needLen("BatchNormRunningUpdate", "batchMean", len(batchMean), c)
	needLen("BatchNormRunningUpdate", "batchVar", len(batchVar), c)
	for i := 0; i < c; i++ {
		runningMean[i] = runningMean[i]*momentum + batchMean[i]*(1-momentum)
		runningVar[i] = runningVar[i]*momentum + batchVar[i]*(1-momentum)
	}
}

// BatchNormBackward computes the gradients of BatchNormTraining given dy, the input x,
// scale and the batch statistics it produced:
//
//	x̂ = (x − μ)·r with r = 1/√(σ² + eps);  dbias = Σ dy;  dscale = Σ dy·x̂
//	dx = scale·r·(dy − dbias/M − x̂·dscale/M)   with M = n·spatial
//
// dx ([n, c, spatial]), dscale and dbias ([c]) are overwritten; dx may alias dy.
func BatchNormBackward[T Float](x, dy, scale, batchMean, batchVar []T, eps T, n, c, spatial int, dx, dscale, dbias []T) {
	bnCheck("BatchNormBackward", n, c, spatial, []bnLen{
		{"x", len(x), n * c * spatial}, {"dy", len(dy), n * c * spatial}, {"dx", len(dx), n * c * spatial},
		{"scale", len(scale), c}, {"batchMean", len(batchMean), c}, {"batchVar", len(batchVar), c},
		{"dscale", len(dscale), c}, {"dbias", len(dbias), c}})
	m := float64(n * spatial)
	bnChannels(n, c, spatial, func(ch int) {
		mean := float64(batchMean[ch])
		r := 1 / math.Sqrt(float64(batchVar[ch])+float64(eps))
		var sdy, sdyx float64
		for b := 0; b < n; b++ {
			off := (b*c + ch) * spatial
			xs, ds := x[off:off+spatial], dy[off:off+spatial]
			for i, g := range ds {
				sdy += float64(g)
				sdyx += float64(g) * (float64(xs[i]) - mean)
			}
		}
		dbias[ch] = T(sdy)
		dscale[ch] = T(sdyx * r)
		if m == 0 {
			return
		}
		// dx = k·dy + a·x + b, folded per channel.
		k := float64(scale[ch]) * r
		a := -k * r * r * sdyx / m
		bb := -k*sdy/m - a*mean
		kt, at, bt := T(k), T(a), T(bb)
		for b := 0; b < n; b++ {
			off := (b*c + ch) * spatial
			xs, ds, dxs := x[off:off+spatial], dy[off:off+spatial], dx[off:off+spatial]
			for i := range dxs {
				dxs[i] = kt*ds[i] + at*xs[i] + bt
			}
		}
	})
}
