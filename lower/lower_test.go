package lower

import (
	"math/rand"
	"strings"
	"testing"

	"ppc.dev/ppc/ir"
)

func parseFunc(t *testing.T, src string) *ir.Func {
	t.Helper()
	m, err := ir.ParseAndVerify("t.ir", src)
	if err != nil {
		t.Fatal(err)
	}
	return m.Funcs[0]
}

func TestFusion(t *testing.T) {
	f := parseFunc(t, `func @f(%x: f32[4,8], %b: f32[8], %w: f32[8,8]) -> (f32[4,8], f32[4,8]) {
  %0 = add %x, %b : f32[4,8]
  %1 = mul %0, %0 : f32[4,8]
  %2 = relu %1 : f32[4,8]
  %3 = matmul %2, %w : f32[4,8]
  %4 = tanh %3 : f32[4,8]
  %5 = exp %4 : f32[4,8]
  %6 = neg %4 : f32[4,8]
  %c = constant {value = dense<f32[]: 2>} : f32[]
  %7 = mul %5, %c : f32[4,8]
  return %7, %6
}
`)
	// %0's two uses are both in the mul, so add→mul→relu fuse; tanh has users in two chains
	// (exp's and neg's) and stays; exp→mul fuse, emitted where their root (the mul) is.
	b := lowerNames(t, f, "fused(add,mul,relu) matmul tanh neg fused(exp,mul)")
	if len(b.Consts) != 1 {
		t.Fatalf("%d constant slots", len(b.Consts))
	}
	// The fused exp→mul reads %4 and the constant, and writes %7.
	last := b.Launches[4]
	if len(last.In) != 2 || b.Slots[last.Out[0]].String() != "f32[4,8]" {
		t.Fatalf("fused launch %+v", last)
	}
}

// TestFusionWritesReturnedIntermediates: AdamW's shape — each new moment is returned and
// read by the parameter's update, whose bf16 copy is returned too — is one launch writing
// four results, in program order, each the step that computes it.
func TestFusionWritesReturnedIntermediates(t *testing.T) {
	f := parseFunc(t, `func @f(%m: f32[8], %v: f32[8], %g: f32[8], %p: f32[8], %b: f32[]) -> (f32[8], f32[8], f32[8], bf16[8]) {
  %0 = mul %m, %b : f32[8]
  %m2 = add %0, %g : f32[8]
  %1 = mul %g, %g : f32[8]
  %v2 = add %v, %1 : f32[8]
  %2 = sqrt %v2 : f32[8]
  %3 = div %m2, %2 : f32[8]
  %p2 = sub %p, %3 : f32[8]
  %h = cast %p2 {to = bf16} : bf16[8]
  return %m2, %v2, %p2, %h
}
`)
	b, err := Func(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Launches) != 1 {
		var names []string
		for _, l := range b.Launches {
			names = append(names, b.Kernels[l.Kernel].Name())
		}
		t.Fatalf("launches %v, want one", names)
	}
	l, k := b.Launches[0], b.Kernels[b.Launches[0].Kernel]
	if len(l.Out) != 4 || len(k.Outputs) != 4 {
		t.Fatalf("launch writes %d slots, kernel %d outputs; want 4", len(l.Out), len(k.Outputs))
	}
	for i, r := range b.Results {
		if l.Out[i] != r {
			t.Errorf("output %d is slot %d, the function returns slot %d there", i, l.Out[i], r)
		}
		step := k.Fused[k.Outputs[i]]
		if !step.Type.Equal(b.Slots[r]) {
			t.Errorf("output %d is step %d of type %s, returned %s", i, k.Outputs[i], step.Type, b.Slots[r])
		}
	}
	if got := k.Fused[k.Outputs[0]].Op.Name; got != "add" {
		t.Errorf("first output computed by %s, want the moment's add", got)
	}
}

func TestFusionKeepsShapes(t *testing.T) {
	// A broadcasting op whose operand has a smaller shape does not pull that operand's
	// producer into its loop.
	f := parseFunc(t, `func @f(%x: f32[8], %y: f32[4,8]) -> (f32[4,8]) {
  %0 = exp %x : f32[8]
  %1 = add %y, %0 : f32[4,8]
  return %1
}
`)
	b, err := Func(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Launches) != 2 {
		t.Fatalf("%d launches, want exp and add separately", len(b.Launches))
	}
}

func TestPlanMemory(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	smaller := 0 // trials where largest-first placement beat start order
	for trial := 0; trial < 200; trial++ {
		n := 1 + r.Intn(60)
		iv := make([]Interval, n)
		for i := range iv {
			s := r.Intn(100)
			iv[i] = Interval{Start: s, End: s + r.Intn(30), Size: int64(1 + r.Intn(5000))}
		}
		off, arena, bound := PlanMemory(iv)
		if arena < bound {
			t.Fatalf("arena %d below the live bound %d", arena, bound)
		}
		if _, byStart, _ := planByStart(iv); arena > byStart {
			t.Fatalf("arena %d above start order's %d", arena, byStart)
		} else if arena < byStart {
			smaller++
		}
		if peak := PeakLive(iv); peak != bound {
			t.Fatalf("PeakLive %d, PlanMemory's live bound %d", peak, bound)
		}
		for i := range iv {
			if off[i]%Alignment != 0 || off[i]+iv[i].Size > arena {
				t.Fatalf("buffer %d misplaced at %d (arena %d)", i, off[i], arena)
			}
			for j := i + 1; j < n; j++ {
				live := iv[i].Start <= iv[j].End && iv[j].Start <= iv[i].End
				overlap := off[i] < off[j]+iv[j].Size && off[j] < off[i]+iv[i].Size
				if live && overlap {
					t.Fatalf("buffers %d %+v and %d %+v overlap at %d and %d", i, iv[i], j, iv[j], off[i], off[j])
				}
			}
		}
	}
	if smaller == 0 {
		t.Errorf("largest-first placement never beat start order in 200 trials")
	}
	// Stack-like lifetimes reuse memory: the arena is the peak, not the sum.
	off, arena, _ := PlanMemory([]Interval{{0, 1, 1024}, {2, 3, 1024}, {4, 5, 1024}})
	if arena != 1024 || off[1] != 0 {
		t.Fatalf("sequential buffers not reused: offsets %v arena %d", off, arena)
	}
}

// PeakLive counts buffers live at the same instruction together, and one that ends where
// another starts as live at once (the instruction reads one and writes the other).
func TestPeakLive(t *testing.T) {
	for _, c := range []struct {
		iv   []Interval
		want int64
	}{
		{nil, 0},
		{[]Interval{{0, 1, 1}, {2, 3, 100}}, 128},
		{[]Interval{{0, 2, 64}, {2, 3, 64}}, 128},
		{[]Interval{{0, 9, 64}, {1, 2, 64}, {3, 4, 64}, {4, 5, 64}}, 192},
	} {
		if got := PeakLive(c.iv); got != c.want {
			t.Errorf("PeakLive(%v) = %d, want %d", c.iv, got, c.want)
		}
	}
}

// TestCollectivesBreakFusion: a collective is communication, not an elementwise step, so the
// chains on either side of it are separate launches and the collective its own (code
// generation turns it into a collective instruction, or an alias for copy_to_axis).
func TestCollectivesBreakFusion(t *testing.T) {
	m, err := ir.ParseAndVerify("t.ir", `module @m attributes {mesh = {tp = 2}, partitioned}

func @f(%x: f32[4,8], %b: f32[8]) -> (f32[4,8]) {
  %0 = add %x, %b : f32[4,8]
  %1 = relu %0 : f32[4,8]
  %2 = all_reduce %1 {axis = tp} : f32[4,8]
  %3 = tanh %2 : f32[4,8]
  %4 = copy_to_axis %3 {axis = tp} : f32[4,8]
  %5 = exp %4 : f32[4,8]
  %6 = neg %5 : f32[4,8]
  return %6
}
`)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Func(m.Funcs[0])
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range b.Launches {
		names = append(names, b.Kernels[l.Kernel].Name())
	}
	if got, want := strings.Join(names, " "), "fused(add,relu) all_reduce tanh copy_to_axis fused(exp,neg)"; got != want {
		t.Fatalf("launches %q, want %q", got, want)
	}
}

// TestConvEpilogue: the elementwise group after a convolution runs as its epilogue when it
// reads the convolution's result only there, everything it reads has that type, and those
// other operands exist before the convolution (so the launch stays where the convolution
// was). A residual block's downsampling convolution, after the main path's, takes the add.
func TestConvEpilogue(t *testing.T) {
	f := parseFunc(t, `func @f(%x: f32[1,4,6,6], %w: f32[4,4,3,3] {param}, %b: f32[4] {param}, %wd: f32[4,4,1,1] {param}, %s: f32[] {param}) -> (f32[1,4,6,6], f32[1,4,6,6], f32[1,4,6,6], f32[1,4,6,6]) {
  %c0 = conv %x, %w, %b {pads = [1, 1, 1, 1]} : f32[1,4,6,6]
  %r0 = relu %c0 : f32[1,4,6,6]
  %c1 = conv %r0, %w {pads = [1, 1, 1, 1]} : f32[1,4,6,6]
  %d1 = conv %x, %wd : f32[1,4,6,6]
  %a1 = add %c1, %d1 : f32[1,4,6,6]
  %r1 = relu %a1 : f32[1,4,6,6]
  %c2 = conv %r1, %w {pads = [1, 1, 1, 1]} : f32[1,4,6,6]
  %m2 = mul %c2, %s : f32[1,4,6,6]
  %c3 = conv %r1, %w {pads = [1, 1, 1, 1]} : f32[1,4,6,6]
  %r3 = relu %c3 : f32[1,4,6,6]
  %t3 = tanh %c3 : f32[1,4,6,6]
  %c4 = conv %r1, %w {pads = [1, 1, 1, 1]} : f32[1,4,6,6]
  %r4 = relu %c4 : f32[1,4,6,6]
  return %m2, %r3, %t3, %r4
}
`)
	// c0 → relu fuses; c1's add needs d1, defined after it, so d1 takes the add and relu;
	// c2's mul reads a scalar (broadcast) and stays apart; c3 has two users in two groups.
	b := lowerNames(t, f, "conv+relu conv conv+add+relu conv mul conv relu tanh conv+relu")
	k := b.Kernels[b.Launches[2].Kernel]
	l := b.Launches[2]
	// d1's launch: x and wd, then c1's result; the chain adds $1 (c1) to $0 (d1's result).
	if k.OpInputs != 2 || len(l.In) != 3 || l.In[2] != b.Launches[1].Out[0] || len(l.Out) != 1 {
		t.Fatalf("downsampling epilogue %+v on %+v", k, l)
	}
	if a := k.Fused[0].Args; len(a) != 2 || a[0] != 1 || a[1] != 0 || k.Fused[1].Args[0] != 2 {
		t.Fatalf("epilogue steps %+v", k.Fused)
	}
	if k0 := b.Kernels[b.Launches[0].Kernel]; k0.OpInputs != 3 || len(b.Launches[0].In) != 3 {
		t.Fatalf("first epilogue %+v", k0)
	}
}

// Batch norm takes its ReLU as an epilogue too (DenseNet's pre-activation layers); a ReLU
// after a matmul stays its own launch (no matmul epilogue).
func TestBatchNormEpilogue(t *testing.T) {
	f := parseFunc(t, `func @f(%x: f32[1,4,3,3], %s: f32[4], %b: f32[4], %m: f32[4], %v: f32[4], %a: f32[2,3], %w: f32[3,3]) -> (f32[1,4,3,3], f32[2,3]) {
  %n = batch_norm %x, %s, %b, %m, %v : f32[1,4,3,3]
  %r = relu %n : f32[1,4,3,3]
  %y = matmul %a, %w : f32[2,3]
  %z = relu %y : f32[2,3]
  return %r, %z
}
`)
	lowerNames(t, f, "batch_norm+relu matmul relu")
}

// lowerNames lowers f and checks its launches' kernel names, in order.
func lowerNames(t *testing.T, f *ir.Func, want string) *Block {
	t.Helper()
	b, err := Func(f)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range b.Launches {
		names = append(names, b.Kernels[l.Kernel].Name())
	}
	if got := strings.Join(names, " "); got != want {
		t.Fatalf("launches %q, want %q", got, want)
	}
	return b
}

// TestPrologue: an inference batch norm (with its ReLU, or alone) whose result only a
// pointwise convolution reads, as its operand 0, runs inside the convolution's launch: the
// launch reads the batch norm's operands, then the convolution's weights and bias, then its
// epilogue's; the normalised input gets no slot. Not where the result has another use, is
// returned, or feeds a 3×3, strided or 16-bit convolution, or the convolution's weights, or
// where the batch norm's epilogue is more than a ReLU.
func TestPrologue(t *testing.T) {
	f := parseFunc(t, `func @f(%x: f32[1,4,5,5], %s: f32[4], %b: f32[4], %m: f32[4], %v: f32[4], %w: f32[6,4,1,1] {param}, %cb: f32[6] {param}, %w3: f32[6,4,3,3] {param}, %h: f16[1,4,5,5], %hs: f16[4], %hw: f16[6,4,1,1], %k: f32[]) -> (f32[1,6,5,5], f32[1,6,5,5], f32[1,6,5,5], f32[1,6,3,3], f32[1,4,5,5], f32[1,6,5,5], f16[1,6,5,5], f32[1,6,5,5], f32[1,6,5,5]) {
  %n0 = batch_norm %x, %s, %b, %m, %v : f32[1,4,5,5]
  %r0 = relu %n0 : f32[1,4,5,5]
  %c0 = conv %r0, %w, %cb : f32[1,6,5,5]
  %y0 = relu %c0 : f32[1,6,5,5]
  %n1 = batch_norm %x, %s, %b, %m, %v : f32[1,4,5,5]
  %c1 = conv %n1, %w : f32[1,6,5,5]
  %n2 = batch_norm %x, %s, %b, %m, %v : f32[1,4,5,5]
  %r2 = relu %n2 : f32[1,4,5,5]
  %c2 = conv %r2, %w3, %cb {pads = [1, 1, 1, 1]} : f32[1,6,5,5]
  %n3 = batch_norm %x, %s, %b, %m, %v : f32[1,4,5,5]
  %r3 = relu %n3 : f32[1,4,5,5]
  %c3 = conv %r3, %w {strides = [2, 2]} : f32[1,6,3,3]
  %n4 = batch_norm %x, %s, %b, %m, %v : f32[1,4,5,5]
  %r4 = relu %n4 : f32[1,4,5,5]
  %c4 = conv %r4, %w : f32[1,6,5,5]
  %n5 = batch_norm %h, %hs, %hs, %hs, %hs : f16[1,4,5,5]
  %c5 = conv %n5, %hw : f16[1,6,5,5]
  %n6 = batch_norm %x, %s, %b, %m, %v : f32[1,4,5,5]
  %e6 = mul %n6, %n6 : f32[1,4,5,5]
  %c6 = conv %e6, %w : f32[1,6,5,5]
  %n7 = batch_norm %x, %s, %b, %m, %v : f32[1,4,5,5]
  %r7 = relu %n7 : f32[1,4,5,5]
  %c7 = conv %r7, %w : f32[1,6,5,5]
  %d7 = conv %r7, %w : f32[1,6,5,5]
  %a7 = add %c7, %d7 : f32[1,6,5,5]
  return %y0, %c1, %c2, %c3, %r4, %c4, %c5, %c6, %a7
}
`)
	b := lowerNames(t, f, "batch_norm+relu>conv+relu batch_norm>conv batch_norm+relu conv batch_norm+relu conv batch_norm+relu conv batch_norm conv batch_norm+mul conv batch_norm+relu conv conv+add")
	k, l := b.Kernels[b.Launches[0].Kernel], b.Launches[0]
	// x, s, b, m, v, then w and cb: the epilogue (a ReLU) reads nothing more.
	if k.Pre == nil || k.PreInputs != 5 || k.OpInputs != 7 || len(l.In) != 7 || l.In[5] != b.Args[5] || l.In[6] != b.Args[6] || l.In[0] != b.Args[0] {
		t.Fatalf("prologue launch %+v reading %v (args %v)", k, l.In, b.Args)
	}
	if k.Pre.Op.Name != "batch_norm" || len(k.Pre.Fused) != 1 || k.Pre.OpInputs != 5 {
		t.Fatalf("prologue kernel %+v", k.Pre)
	}
	if k1 := b.Kernels[b.Launches[1].Kernel]; k1.Pre == nil || k1.PreInputs != 5 || k1.OpInputs != 0 || len(b.Launches[1].In) != 6 {
		t.Fatalf("batch norm alone as the prologue: %+v on %v", k1, b.Launches[1].In)
	}
	// Neither fused normalised input has a slot.
	for i, name := range b.SlotNames {
		if name == "r0" || name == "n1" {
			t.Fatalf("slot %d holds %%%s, which the launch computes inside", i, name)
		}
	}
}
