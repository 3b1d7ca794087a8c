package cudatest

import (
	"testing"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/kernels/cuda"
	"ppc.dev/ppc/runtime/device"
)

// CaseKernels generates the kernels of every case, named after the cases.
func CaseKernels(t testing.TB, cases []Case) []cuda.Kernel {
	t.Helper()
	var ks []cuda.Kernel
	for _, c := range cases {
		k, err := cuda.Kernels(c.Spec, c.Name)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		ks = append(ks, k...)
	}
	return ks
}

// Kernels is every case's kernels and the communication's own: the ordered reductions' folds
// (an all-reduce's over 3 members, in each float dtype and op; the permutes of gathers and
// scatters are transposes, among the cases).
func Kernels(t testing.TB) []cuda.Kernel {
	t.Helper()
	ks := CaseKernels(t, Cases())
	for _, dt := range []ir.DType{ir.F32, ir.F64, ir.BF16, ir.F16} {
		for _, op := range []string{"sum", "mean", "max", "min"} {
			c := device.Coll{Kind: device.AllReduce, In: ir.Type{DType: dt, Shape: ir.Shape{3 * 7}}, Op: op}
			fold, err := cuda.CollectiveKernels(c, 3, 0)
			if err != nil || len(fold) != 1 {
				t.Fatalf("%v of %s over 3 members: %d kernels, %v", op, c.In, len(fold), err)
			}
			ks = append(ks, fold...)
		}
	}
	return ks
}
