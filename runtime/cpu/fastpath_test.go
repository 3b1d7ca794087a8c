package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// specialF64 are values that exercise IEEE edge cases: signed zeros, infinities, NaN,
// subnormals of both widths, values that overflow or underflow f32 when combined, and ties.
var specialF64 = []float64{0, math.Copysign(0, -1), math.Inf(1), math.Inf(-1), math.NaN(), 1, -1, 3,
	1e-45, -1e-45, 1.4e-45, 1e-39, 5e-324, 3.4e38, -3.4e38, 1e38, 1e-38, 1 + 1.0/(1<<24), 1 + 1.0/(1<<23),
	0.1, 1.0 / 3, 16777217, 1e308, 1e-308,
	math.Float64frombits(0xFFF8000000000000), math.Float64frombits(0x7FF4000000000000), math.Float64frombits(0x7FFC200000000000)}

// randBits fills a tensor with random values, a third of them from the special list.
func randBits(r *rand.Rand, t ir.Type) device.Tensor {
	x := newTensor(t)
	n := t.NumElements()
	for i := 0; i < n; i++ {
		var v float64
		switch r.IntN(3) {
		case 0:
			v = specialF64[r.IntN(len(specialF64))]
		case 1:
			v = math.Ldexp(r.Float64()*2-1, r.IntN(300)-150)
		default:
			v = r.NormFloat64()
		}
		if t.DType == ir.F32 {
			x.F32()[i] = float32(v)
		} else {
			x.F64()[i] = v
		}
	}
	return x
}

// sameBits returns the index of the first element whose bits differ, or −1. Any NaN matches
// any NaN: which operand's payload a NaN result carries when both operands are NaNs is the
// hardware's choice by operand order, which the compiler may pick either way for a
// commutative op (it does differ between the two paths in -race builds).
func sameBits(a, b device.Tensor) int {
	av, bv := values(a), values(b)
	size := a.Type.DType.Size()
	for i := range av {
		if av[i] != av[i] && bv[i] != bv[i] {
			continue
		}
		for j := i * size; j < (i+1)*size; j++ {
			if a.Data[j] != b.Data[j] {
				return i
			}
		}
	}
	return -1
}

// TestArithFastPathBitIdentical checks the f32/f64 add/sub/mul/div fast path against the
// fused engine it bypasses, bit for bit, over broadcasting patterns and IEEE edge cases.
func TestArithFastPathBitIdentical(t *testing.T) {
	r := rand.New(rand.NewPCG(51, 52))
	type pattern struct{ a, b, out []int }
	patterns := []pattern{
		{[]int{37, 129}, []int{37, 129}, []int{37, 129}}, // same shape
		{[]int{37, 129}, []int{129}, []int{37, 129}},     // bias row
		{[]int{129}, []int{37, 129}, []int{37, 129}},     // bias row first
		{[]int{37, 129}, []int{37, 1}, []int{37, 129}},   // column
		{[]int{37, 129}, []int{}, []int{37, 129}},        // scalar
		{[]int{}, []int{5, 3}, []int{5, 3}},              // scalar first
		{[]int{1, 129}, []int{37, 1}, []int{37, 129}},    // outer product
		{[]int{3, 1, 7}, []int{1, 5, 7}, []int{3, 5, 7}},
		{[]int{}, []int{}, []int{}},                      // rank 0
		{[]int{0, 4}, []int{4}, []int{0, 4}},             // empty
		{[]int{5, 40000}, []int{40000}, []int{5, 40000}}, // long rows, split across workers
	}
	for _, name := range []string{"add", "sub", "mul", "div"} {
		for _, d := range floatTypes {
			for _, p := range patterns {
				a, b := ir.Type{DType: d, Shape: p.a}, ir.Type{DType: d, Shape: p.b}
				out := ir.Type{DType: d, Shape: p.out}
				specs := []*device.Spec{
					{Op: ir.Lookup(name), In: []ir.Type{a, b}, Out: []ir.Type{out}},
					{Fused: []device.FusedStep{{Op: ir.Lookup(name), Args: []int{0, 1}, Type: out}}, In: []ir.Type{a, b}, Out: []ir.Type{out}},
					{Fused: []device.FusedStep{{Op: ir.Lookup(name), Args: []int{1, 0}, Type: out}}, In: []ir.Type{b, a}, Out: []ir.Type{out}},
				}
				for si, s := range specs {
					fast := arithFastPath(s)
					if fast == nil {
						t.Fatalf("%s %s %v: no fast path", name, d, p)
					}
					slow, err := prepareEngine(s)
					if err != nil {
						t.Fatal(err)
					}
					in := []device.Tensor{randBits(r, s.In[0]), randBits(r, s.In[1])}
					got, want := newTensor(out), newTensor(out)
					if err := fast(in, []device.Tensor{got}); err != nil {
						t.Fatal(err)
					}
					if err := slow(in, []device.Tensor{want}); err != nil {
						t.Fatal(err)
					}
					if i := sameBits(got, want); i >= 0 {
						g, w := values(got)[i], values(want)[i]
						t.Fatalf("%s %s %v spec %d: element %d: fast path %v (%x), engine %v (%x)", name, d, p, si, i, g, got.Data[i*d.Size():(i+1)*d.Size()], w, want.Data[i*d.Size():(i+1)*d.Size()])
					}
				}
			}
		}
	}
	// Launches the fast path does not cover fall through to the engine.
	for _, s := range []*device.Spec{
		{Op: ir.Lookup("add"), In: []ir.Type{ir.T(ir.F16, 4), ir.T(ir.F16, 4)}, Out: []ir.Type{ir.T(ir.F16, 4)}},
		{Op: ir.Lookup("div"), In: []ir.Type{ir.T(ir.I64, 4), ir.T(ir.I64, 4)}, Out: []ir.Type{ir.T(ir.I64, 4)}},
		{Op: ir.Lookup("pow"), In: []ir.Type{ir.T(ir.F32, 4), ir.T(ir.F32, 4)}, Out: []ir.Type{ir.T(ir.F32, 4)}},
		{Fused: []device.FusedStep{{Op: ir.Lookup("add"), Args: []int{0, 0}, Type: ir.T(ir.F32, 4)},
			{Op: ir.Lookup("mul"), Args: []int{1, 0}, Type: ir.T(ir.F32, 4)}}, In: []ir.Type{ir.T(ir.F32, 4)}, Out: []ir.Type{ir.T(ir.F32, 4)}},
	} {
		if arithFastPath(s) != nil {
			t.Errorf("fast path taken for %s %v", s.Name(), s.In)
		}
	}
}

// TestEngineNumericsContract checks fused chains bit for bit against the engine's contract
// computed element by element here: every step in float64 on the broadcast inputs, rounded to
// the step's dtype. It covers the typed loaders (same shape, bias row, scalar, general
// broadcast) and the skipped final rounding.
func TestEngineNumericsContract(t *testing.T) {
	r := rand.New(rand.NewPCG(53, 54))
	round := func(d ir.DType, v float64) float64 {
		switch d {
		case ir.F32:
			return float64(float32(v))
		case ir.F16:
			return float64(ir.F16ToF32(ir.F32ToF16(float32(v))))
		}
		return v
	}
	gelu := func(x float64) float64 { return 0.5 * x * math.Erfc(-x/math.Sqrt2) }
	for _, d := range []ir.DType{ir.F32, ir.F64, ir.F16} {
		for _, shapes := range [][3][]int{
			{{6, 300}, {6, 300}, {300}},
			{{6, 300}, {1, 300}, {}},
			{{4, 1, 70}, {4, 9, 70}, {9, 1}},
			{{1029}, {1029}, {1}},
		} {
			out, _ := ir.BroadcastShapes(shapes[0], shapes[1], shapes[2])
			in := make([]ir.Type, 3)
			ts := make([]device.Tensor, 3)
			for i := range in {
				in[i] = ir.Type{DType: d, Shape: shapes[i]}
				ts[i] = tensorOf(d, shapes[i], randVals(r, prod(shapes[i]), -3, 3))
			}
			ot := ir.Type{DType: d, Shape: out}
			s := &device.Spec{Fused: []device.FusedStep{
				{Op: ir.Lookup("mul"), Args: []int{0, 1}, Type: ot},
				{Op: ir.Lookup("add"), Args: []int{3, 2}, Type: ot},
				{Op: ir.Lookup("gelu"), Args: []int{4}, Type: ot},
			}, In: in, Out: []ir.Type{ot}}
			impl, err := testDev.Prepare(s)
			if err != nil {
				t.Fatal(err)
			}
			got := newTensor(ot)
			if err := impl(ts, []device.Tensor{got}); err != nil {
				t.Fatal(err)
			}
			vals := [3][]float64{values(ts[0]), values(ts[1]), values(ts[2])}
			at := func(i int, e []int) float64 {
				sh := shapes[i]
				c := e[len(e)-len(sh):]
				cc := make([]int, len(sh))
				for j := range sh {
					if sh[j] != 1 {
						cc[j] = c[j]
					}
				}
				return vals[i][ravel(cc, sh)]
			}
			gv := values(got)
			for e := range gv {
				c := unravel(e, out)
				v := round(d, at(0, c)*at(1, c))
				v = round(d, v+at(2, c))
				v = round(d, gelu(v))
				if math.Float64bits(v) != math.Float64bits(gv[e]) {
					t.Fatalf("%s %v: element %d = %v, want %v", d, shapes, e, gv[e], v)
				}
			}
		}
	}
}

// TestArithChainFastPathBitIdentical checks random f32 and f64 chains of the chain ops,
// with broadcast inputs and IEEE edge cases, against the engine bit for bit.
func TestArithChainFastPathBitIdentical(t *testing.T) {
	r := rand.New(rand.NewPCG(55, 56))
	names := []string{"add", "sub", "mul", "div", "neg", "abs", "sqrt", "relu"}
	shapes := [][]int{{7, 300}, {300}, {7, 1}, {}, {1, 300}}
	for iter := 0; iter < 200; iter++ {
		d := floatTypes[iter%2]
		out := ir.T(d, 7, 300)
		if iter%10 == 9 {
			out = ir.T(d, 3, 5000) // several chunks per worker
		}
		nIn := 1 + r.IntN(3)
		var in []ir.Type
		for i := 0; i < nIn; i++ {
			sh := shapes[r.IntN(len(shapes))]
			if out.Shape[1] != 300 {
				sh = []int{3, 5000}
			}
			in = append(in, ir.Type{DType: d, Shape: sh})
		}
		var steps []device.FusedStep
		for j := 0; j < 1+r.IntN(5); j++ {
			name := names[r.IntN(len(names))]
			n := chainOps[name]
			args := make([]int, n)
			for a := range args {
				args[a] = r.IntN(nIn + j)
			}
			steps = append(steps, device.FusedStep{Op: ir.Lookup(name), Args: args, Type: out})
		}
		s := &device.Spec{Fused: steps, In: in, Out: []ir.Type{out}}
		fast := arithChainFastPath(s)
		if fast == nil {
			t.Fatalf("no fast path for %v", steps)
		}
		slow, err := prepareEngine(s)
		if err != nil {
			t.Fatal(err)
		}
		ts := make([]device.Tensor, nIn)
		for i := range ts {
			ts[i] = randBits(r, in[i])
		}
		got, want := newTensor(out), newTensor(out)
		if err := fast(ts, []device.Tensor{got}); err != nil {
			t.Fatal(err)
		}
		if err := slow(ts, []device.Tensor{want}); err != nil {
			t.Fatal(err)
		}
		if i := sameBits(got, want); i >= 0 {
			var ops []string
			for _, st := range steps {
				ops = append(ops, st.Op.Name)
			}
			t.Fatalf("%s chain %v: element %d: fast path %v, engine %v", d, ops, i, values(got)[i], values(want)[i])
		}
	}
	// Chains with other ops or mixed dtypes are left to the engine.
	f32 := ir.T(ir.F32, 4)
	for _, s := range []*device.Spec{
		{Fused: []device.FusedStep{{Op: ir.Lookup("exp"), Args: []int{0}, Type: f32}}, In: []ir.Type{f32}, Out: []ir.Type{f32}},
		{Fused: []device.FusedStep{{Op: ir.Lookup("cast"), Args: []int{0}, Attrs: attrs("to", "f64"), Type: ir.T(ir.F64, 4)},
			{Op: ir.Lookup("add"), Args: []int{1, 1}, Type: ir.T(ir.F64, 4)}}, In: []ir.Type{f32}, Out: []ir.Type{ir.T(ir.F64, 4)}},
		{Fused: []device.FusedStep{{Op: ir.Lookup("add"), Args: []int{0, 0}, Type: ir.T(ir.F16, 4)}}, In: []ir.Type{ir.T(ir.F16, 4)}, Out: []ir.Type{ir.T(ir.F16, 4)}},
	} {
		if arithChainFastPath(s) != nil {
			t.Errorf("chain fast path taken for %v", s.Fused[0].Op.Name)
		}
	}
}

// TestFusedOutputsInPlace: a chain writing several results (AdamW's update as lower fuses
// it) gives the same bits whether its results go to fresh buffers or over its own inputs, as
// code generation places the optimizer's updates — on the f32 chain fast path and on the
// engine (the bf16 copy of the parameter is a cast the fast path does not take), with every
// result the step it names: separately computed one-output chains agree bit for bit.
func TestFusedOutputsInPlace(t *testing.T) {
	r := rand.New(rand.NewPCG(91, 92))
	for _, withCast := range []bool{false, true} {
		full := ir.T(ir.F32, 3, 5000) // several chunks per worker
		step := func(name string, args []int, ty ir.Type) device.FusedStep {
			return device.FusedStep{Op: ir.Lookup(name), Args: args, Type: ty}
		}
		steps := []device.FusedStep{
			step("mul", []int{0, 4}, full), step("add", []int{5, 2}, full), step("mul", []int{2, 2}, full),
			step("abs", []int{1}, full), step("add", []int{8, 7}, full), step("sqrt", []int{9}, full),
			step("div", []int{6, 10}, full), step("sub", []int{3, 11}, full),
			step("sub", []int{12, 0}, full), // reads m again after m' is made: in place, m' must not be written yet
		}
		outs := []int{1, 4, 8}
		outTypes := []ir.Type{full, full, full}
		if withCast {
			steps = append(steps, device.FusedStep{Op: ir.Lookup("cast"), Args: []int{13}, Attrs: attrs("to", "bf16"), Type: ir.T(ir.BF16, 3, 5000)})
			outs = append(outs, 9)
			outTypes = append(outTypes, ir.T(ir.BF16, 3, 5000))
		}
		in := []ir.Type{full, full, full, full, ir.T(ir.F32)} // m, v, g, p, β
		s := &device.Spec{Fused: steps, Outputs: outs, In: in, Out: outTypes}
		if fast := arithChainFastPath(s); (fast != nil) == withCast {
			t.Fatalf("cast %v: chain fast path taken: %v", withCast, fast != nil)
		}
		impl, err := prepareElementwise(s)
		if err != nil {
			t.Fatal(err)
		}
		ts := make([]device.Tensor, len(in))
		for i := range ts {
			ts[i] = randBits(r, in[i])
		}
		fresh := make([]device.Tensor, len(outTypes))
		for i, ty := range outTypes {
			fresh[i] = newTensor(ty)
		}
		if err := impl(ts, fresh); err != nil {
			t.Fatal(err)
		}
		// Each result alone: the chain cut at its step.
		for o, j := range outs {
			one := &device.Spec{Fused: steps[:j+1], In: in, Out: []ir.Type{outTypes[o]}}
			alone, err := prepareElementwise(one)
			if err != nil {
				t.Fatal(err)
			}
			want := newTensor(outTypes[o])
			if err := alone(ts, []device.Tensor{want}); err != nil {
				t.Fatal(err)
			}
			if i := sameBits(fresh[o], want); i >= 0 {
				t.Fatalf("cast %v: result %d element %d: %v, computed alone %v", withCast, o, i, values(fresh[o])[i], values(want)[i])
			}
		}
		// In place: m', v', p' over m, v, p.
		inPlace := []device.Tensor{ts[0], ts[1], ts[3]}
		if withCast {
			inPlace = append(inPlace, newTensor(outTypes[3]))
		}
		if err := impl(ts, inPlace); err != nil {
			t.Fatal(err)
		}
		for o := range inPlace {
			if i := sameBits(inPlace[o], fresh[o]); i >= 0 {
				t.Fatalf("cast %v: result %d in place differs at element %d: %v, not in place %v", withCast, o, i, values(inPlace[o])[i], values(fresh[o])[i])
			}
		}
	}
}
