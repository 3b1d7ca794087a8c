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
			// Four rows at a time: four independent sums (each still in k order, so the same
			// bits as one at a time) instead of one chain of dependent adds, which made this
			// loop a third of the CUDA tests' own CPU time.
			var sums [4]float64
			for i0 := int64(0); i0 < c.M; i0 += 4 {
				n := min(4, c.M-i0)
				if n == 4 {
					r0, r1, r2, r3 := am[i0*c.K:(i0+1)*c.K], am[(i0+1)*c.K:(i0+2)*c.K], am[(i0+2)*c.K:(i0+3)*c.K], am[(i0+3)*c.K:(i0+4)*c.K]
					var s0, s1, s2, s3 float64
					for k, y := range col {
						s0 += r0[k] * y
						s1 += r1[k] * y
						s2 += r2[k] * y
						s3 += r3[k] * y
					}
					sums = [4]float64{s0, s1, s2, s3}
				} else {
					for r := range n {
						row := am[(i0+r)*c.K : (i0+r+1)*c.K]
						sum := 0.0
						for k, x := range row {
							sum += x * col[k]
						}
						sums[r] = sum
					}
				}
				for r := range n {
					i, sum := i0+r, sums[r]
					if c.Bias {
						sum += Bias(i)
					}
					SetFloat(d, int(pd+i+j*c.LDC), sum)
				}
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
