package lower

import (
	"fmt"
	"slices"

	"ppc.dev/ppc/ir"
)

// FusedStep is one op inside a fused elementwise kernel; Args index the kernel's inputs, then
// earlier steps' results.
type FusedStep struct {
	Op    *ir.OpDef
	Args  []int
	Attrs ir.Attrs
	Type  ir.Type
}

// Kernel is what one launch computes: an IR op, or (Op nil) a fused elementwise chain, or an
// op followed by an elementwise epilogue (Op and Fused: see Epilogue). Outputs are the steps
// of a fused chain whose results the launch writes, in the order of its Out slots; nil means
// the last step alone.
type Kernel struct {
	Op      *ir.OpDef
	Attrs   ir.Attrs
	Fused   []FusedStep
	Outputs []int
	// OpInputs is, for an epilogue, how many of the launch's inputs are the op's operands
	// (with a prologue: the prologue's inputs and the op's operands 1, 2, …): the chain's
	// input 0 is the op's result and its inputs 1, 2, … the launch's inputs from OpInputs on.
	OpInputs int
	// Pre, when not nil, is the op's prologue: the kernel (an op, possibly with an
	// epilogue) whose result is the op's operand 0, computed inside this launch instead of
	// written out by its own. The launch reads Pre's PreInputs inputs first, then the op's
	// operands 1, 2, …, then the epilogue's. See prologues.
	Pre       *Kernel
	PreInputs int
}

// Epilogue reports whether the kernel is an op followed by an elementwise chain.
func (k *Kernel) Epilogue() bool { return k.Op != nil && len(k.Fused) > 0 }

// Name is the op name, "fused(add,mul,…)", or for an epilogue the op's and its steps'
// ("conv+relu", "conv+add+relu"), after a prologue's name and ">"
// ("batch_norm+relu>conv+relu").
func (k *Kernel) Name() string {
	if k.Op != nil {
		s := k.Op.Name
		if k.Pre != nil {
			s = k.Pre.Name() + ">" + s
		}
		for _, st := range k.Fused {
			s += "+" + st.Op.Name
		}
		return s
	}
	s := "fused("
	for i, st := range k.Fused {
		if i > 0 {
			s += ","
		}
		s += st.Op.Name
	}
	return s + ")"
}

// Launch runs Kernel on value slots In, writing Out.
type Launch struct {
	Kernel  int
	In, Out []int
}

// Block is a function lowered to kernel launches over numbered value slots. Slots are the
// function's arguments, the values kernels produce, and constants; each has a static type.
type Block struct {
	Name     string
	Slots    []ir.Type
	Args     []int // slot of each function argument
	Results  []int // slot of each returned value (a slot may repeat or be an argument)
	Consts   map[int]*ir.Dense
	Kernels  []Kernel
	Launches []Launch
	// SlotNames are readable names for slots (the IR value names), for dumps.
	SlotNames []string
}

// Func lowers one function. Every op becomes one launch, except constants (which become
// constant slots) and chains of elementwise ops, which fuse into one launch when every use of
// an intermediate result is by an op of the chain and it has that op's shape (so the fused
// loop runs over one index space). An intermediate the function also returns is written as
// one more output of the launch: AdamW's new moments and parameter, and the parameter's bf16
// copy, are one launch, each element read before any is written (so each may be written in
// place) — the same steps in the same order as separate launches, so the same bits.
func Func(f *ir.Func) (*Block, error) {
	b := &Block{Name: f.Name, Consts: map[int]*ir.Dense{}}
	slot := map[*ir.Value]int{}
	newSlot := func(v *ir.Value) int {
		if !v.Type.Known() {
			return -1
		}
		slot[v] = len(b.Slots)
		b.Slots = append(b.Slots, v.Type)
		b.SlotNames = append(b.SlotNames, v.Name)
		return slot[v]
	}
	for _, a := range f.Args {
		if newSlot(a) < 0 {
			return nil, fmt.Errorf("@%s: argument %%%s has no known type", f.Name, a.Name)
		}
		b.Args = append(b.Args, slot[a])
	}
	uses := f.Uses()
	returned := map[*ir.Value]bool{}
	for _, r := range f.Results {
		returned[r] = true
	}
	// fusedInto[op] is the op whose kernel computes op as an intermediate step.
	fusedInto := map[*ir.Op]*ir.Op{}
	for i := len(f.Ops) - 1; i >= 0; i-- {
		op := f.Ops[i]
		if !fusible(op) {
			continue
		}
		root := op
		if r, ok := fusedInto[op]; ok {
			root = r
		}
		for _, x := range op.Operands {
			p := x.Def
			if p == nil || !fusible(p) || !x.Type.Shape.Equal(op.Results[0].Type.Shape) {
				continue
			}
			// Every use is in root's chain: uses come later in the function, so they are
			// placed already (a use outside would read x before the chain's launch).
			inChain := true
			for _, u := range uses[x] {
				if u != root && fusedInto[u] != root {
					inChain = false
				}
			}
			if inChain {
				fusedInto[p] = root
			}
		}
	}
	// Group each root's members in program order.
	members := map[*ir.Op][]*ir.Op{}
	for _, op := range f.Ops {
		if r, ok := fusedInto[op]; ok {
			members[r] = append(members[r], op)
		}
	}
	epi := epilogues(f, fusedInto, members, uses, returned)
	preOf := prologues(f, epi, members, uses, returned) // consumer → its prologue's op
	pro := map[*ir.Op]bool{}
	for _, p := range preOf {
		pro[p] = true
	}
	done := map[*ir.Op]bool{}
	for _, op := range f.Ops {
		if done[op] {
			continue // in an epilogue or a prologue, emitted with its op
		}
		if pro[op] {
			// Emitted inside its consumer's launch; its result has no slot.
			done[op] = true
			if root, ok := epi[op]; ok {
				for _, m := range append(members[root], root) {
					done[m] = true
				}
			}
			continue
		}
		var pre *launchParts // op's prologue
		if p, ok := preOf[op]; ok {
			pre = b.parts(p, epi, members, slot, returned)
		}
		if root, ok := epi[op]; ok {
			group := append(members[root], root)
			for _, m := range group {
				done[m] = true
				if (m == root || returned[m.Results[0]]) && newSlot(m.Results[0]) < 0 {
					return nil, fmt.Errorf("%s: result of %s has no known type; run shape-infer", m.Loc, m.Def.Name)
				}
			}
			b.add(b.fuse(group, slot, returned, op, pre))
			continue
		}
		if _, inner := fusedInto[op]; inner {
			if returned[op.Results[0]] && newSlot(op.Results[0]) < 0 {
				return nil, fmt.Errorf("%s: result of %s has no known type; run shape-infer", op.Loc, op.Def.Name)
			}
			continue // emitted with its root
		}
		for _, r := range op.Results {
			if newSlot(r) < 0 {
				return nil, fmt.Errorf("%s: result of %s has no known type; run shape-infer", op.Loc, op.Def.Name)
			}
		}
		if op.Def.Name == "constant" {
			d := op.Attrs.Get("value").(*ir.Dense)
			if d.Elided {
				return nil, fmt.Errorf("%s: constant data was elided; re-import the model", op.Loc)
			}
			b.Consts[slot[op.Results[0]]] = d
			continue
		}
		group := append(members[op], op)
		if len(group) == 1 && !op.Def.Has(ir.Elementwise) {
			lp := &launchParts{k: Kernel{Op: op.Def, Attrs: op.Attrs}, in: b.opInputs(op, slot, pre)}
			lp.k.withPre(pre)
			for _, r := range op.Results {
				lp.out = append(lp.out, slot[r])
			}
			b.add(lp)
			continue
		}
		b.add(b.fuse(group, slot, returned, nil, nil))
	}
	for _, r := range f.Results {
		s, ok := slot[r]
		if !ok {
			return nil, fmt.Errorf("@%s returns a value it does not define", f.Name)
		}
		b.Results = append(b.Results, s)
	}
	return b, nil
}

// fusible ops are elementwise with one result.
func fusible(op *ir.Op) bool { return op.Def.Has(ir.Elementwise) && len(op.Results) == 1 }

// epilogueOps are the ops an elementwise group may follow as their epilogue: those whose CPU
// kernel applies the epilogue to each part of its result while that part is still in cache —
// a convolution's block of output channels (the copy out of its padded result, a row block
// of its GEMM), batch norm's plane — where a separate ReLU or residual add + ReLU launch read
// and wrote every element again (8–12% of a batch-1 ResNet-50 or GoogLeNet step; DenseNet's
// batch norms are followed by ReLUs). Other devices run the op and then the chain in place
// (runtime/device.PrepareEpilogue).
var epilogueOps = map[string]bool{"conv": true, "batch_norm": true}

// epilogues finds the elementwise groups (a chain's root with its members, or a lone
// elementwise op) that run as the epilogue of the op defining one of their operands, and
// returns that op → the group's root. A group qualifies when that operand v is its op's only
// result, is not returned, and every use of v is in the group; every step's result, and every
// other operand of the group, has v's type (the chain runs over v's elements, no
// broadcasting); and those other operands are defined before the op, so that emitting the
// group at the op's place reads nothing the function computes later.
func epilogues(f *ir.Func, fusedInto map[*ir.Op]*ir.Op, members map[*ir.Op][]*ir.Op, uses map[*ir.Value][]*ir.Op, returned map[*ir.Value]bool) map[*ir.Op]*ir.Op {
	pos := map[*ir.Op]int{}
	for i, op := range f.Ops {
		pos[op] = i
	}
	epi := map[*ir.Op]*ir.Op{}
	for _, root := range f.Ops {
		if _, inner := fusedInto[root]; inner || !fusible(root) {
			continue
		}
		group := append(members[root], root)
		in := map[*ir.Op]bool{}
		for _, m := range group {
			in[m] = true
		}
		// Candidates: the outside operands an epilogue op defines, used only here; the first
		// whose op comes after the group's other operands (a residual block's downsampling
		// convolution rather than the main path's, which precedes it).
	candidates:
		for _, m := range group {
			for _, v := range m.Operands {
				if v.Def == nil || in[v.Def] || !epilogueOps[v.Def.Def.Name] || len(v.Def.Results) != 1 || returned[v] || epi[v.Def] != nil {
					continue
				}
				if epilogueFits(group, in, v, uses[v], pos) {
					epi[v.Def] = root
					break candidates
				}
			}
		}
	}
	return epi
}

// prologues finds the inference batch norms (each with a ReLU as its epilogue, or none)
// whose result only a pointwise convolution reads, as its operand 0, and returns that
// convolution → the batch norm. Their launch is then the convolution's prologue (Kernel.Pre):
// the CPU device applies the scale, shift and ReLU to its input as its GEMM packs it
// (kernels/cpu.ConvPre), the bits of the batch norm's own launch, where that launch wrote
// the whole normalised input and the convolution read it back — DenseNet's pre-activation
// layers, 62 launches and 5% of a batch-1 step. Other devices run the two in turn through
// scratch memory (runtime/device.PreparePrologue). Only f32 and f64, the types the CPU
// device fuses, so that the intermediate buffer the memory plan no longer holds is never
// needed there.
func prologues(f *ir.Func, epi map[*ir.Op]*ir.Op, members map[*ir.Op][]*ir.Op, uses map[*ir.Value][]*ir.Op, returned map[*ir.Value]bool) map[*ir.Op]*ir.Op {
	pre := map[*ir.Op]*ir.Op{}
	for _, op := range f.Ops {
		if op.Def.Name != "batch_norm" || len(op.Results) != 1 {
			continue
		}
		v := op.Results[0]
		if root, ok := epi[op]; ok {
			if len(members[root]) > 0 || root.Def.Name != "relu" {
				continue
			}
			v = root.Results[0]
		}
		if returned[v] || len(uses[v]) != 1 {
			continue
		}
		c := uses[v][0]
		if c.Def.Name != "conv" || c.Operands[0] != v || !pointwiseConv(c) {
			continue
		}
		dt := v.Type.DType
		ok := dt == ir.F32 || dt == ir.F64
		for _, x := range append(append([]*ir.Value{}, op.Operands...), c.Operands...) {
			ok = ok && x.Type.DType == dt
		}
		if ok && pre[c] == nil {
			pre[c] = op
		}
	}
	return pre
}

// pointwiseConv reports whether a convolution is 1×1, stride 1 and unpadded (its result has
// its input's spatial extents): a GEMM on its input as it lies, which a prologue can feed.
func pointwiseConv(c *ir.Op) bool {
	if len(c.Operands) < 2 || len(c.Results) != 1 {
		return false
	}
	x, w, y := c.Operands[0].Type, c.Operands[1].Type, c.Results[0].Type
	if !x.Known() || !w.Known() || !y.Known() || x.Rank() < 3 || w.Rank() != x.Rank() || y.Rank() != x.Rank() {
		return false
	}
	for _, d := range w.Shape[2:] {
		if d != 1 {
			return false
		}
	}
	for _, st := range c.Attrs.Ints("strides") {
		if st != 1 {
			return false
		}
	}
	return slices.Equal(x.Shape[2:], y.Shape[2:])
}

// epilogueFits reports whether group can be v's op's epilogue: every use of v is in it,
// every step's result and every other operand has v's type, and those operands are defined
// before v's op.
func epilogueFits(group []*ir.Op, in map[*ir.Op]bool, v *ir.Value, vUses []*ir.Op, pos map[*ir.Op]int) bool {
	for _, u := range vUses {
		if !in[u] {
			return false
		}
	}
	for _, m := range group {
		if !m.Results[0].Type.Equal(v.Type) {
			return false
		}
		for _, x := range m.Operands {
			if x == v || x.Def != nil && in[x.Def] {
				continue
			}
			if !x.Type.Equal(v.Type) || x.Def != nil && pos[x.Def] > pos[v.Def] {
				return false
			}
		}
	}
	return true
}

// launchParts is one launch before it is added to a block: its kernel and its input and
// output slots.
type launchParts struct {
	k       Kernel
	in, out []int
}

// add appends a launch of its own kernel.
func (b *Block) add(lp *launchParts) {
	b.Kernels = append(b.Kernels, lp.k)
	b.Launches = append(b.Launches, Launch{Kernel: len(b.Kernels) - 1, In: lp.in, Out: lp.out})
}

// parts is the launch op (with its epilogue, if it has one) would be on its own.
func (b *Block) parts(op *ir.Op, epi map[*ir.Op]*ir.Op, members map[*ir.Op][]*ir.Op, slot map[*ir.Value]int, returned map[*ir.Value]bool) *launchParts {
	if root, ok := epi[op]; ok {
		return b.fuse(append(members[root], root), slot, returned, op, nil)
	}
	return &launchParts{k: Kernel{Op: op.Def, Attrs: op.Attrs}, in: b.opInputs(op, slot, nil)}
}

// opInputs is the launch inputs op's operands are: with a prologue, the prologue's inputs in
// place of operand 0.
func (b *Block) opInputs(op *ir.Op, slot map[*ir.Value]int, pre *launchParts) []int {
	var in []int
	for i, x := range op.Operands {
		if i == 0 && pre != nil {
			in = append(in, pre.in...)
			continue
		}
		in = append(in, slot[x])
	}
	return in
}

// withPre makes pre (nil: none) the kernel's prologue.
func (k *Kernel) withPre(pre *launchParts) {
	if pre == nil {
		return
	}
	pk := pre.k
	k.Pre, k.PreInputs = &pk, len(pre.in)
	if k.Epilogue() {
		k.OpInputs += len(pre.in) - 1
	}
}

// fuse makes one kernel for an elementwise group whose last member is the root, writing the
// root's result and, before it, every member's the function returns. With op, the group is
// op's epilogue: the launch reads op's operands first (after pre's inputs in place of
// operand 0, when op has a prologue), and the chain's input 0 is op's result.
func (b *Block) fuse(group []*ir.Op, slot map[*ir.Value]int, returned map[*ir.Value]bool, op *ir.Op, pre *launchParts) *launchParts {
	root := group[len(group)-1]
	inGroup := map[*ir.Value]int{} // value → step index
	var inputs []int
	inputIdx := map[int]int{}
	first := 0 // the chain's first input from a slot (after op's result)
	if op != nil {
		first = 1
	}
	var steps []FusedStep
	for _, m := range group {
		st := FusedStep{Op: m.Def, Attrs: m.Attrs, Type: m.Results[0].Type}
		for _, x := range m.Operands {
			if k, ok := inGroup[x]; ok {
				st.Args = append(st.Args, -1-k) // fixed up below once the input count is known
				continue
			}
			if op != nil && x == op.Results[0] {
				st.Args = append(st.Args, 0)
				continue
			}
			s := slot[x]
			i, ok := inputIdx[s]
			if !ok {
				i = first + len(inputs)
				inputIdx[s] = i
				inputs = append(inputs, s)
			}
			st.Args = append(st.Args, i)
		}
		inGroup[m.Results[0]] = len(steps)
		steps = append(steps, st)
	}
	for i := range steps {
		for j, a := range steps[i].Args {
			if a < 0 {
				steps[i].Args[j] = first + len(inputs) + (-1 - a)
			}
		}
	}
	k := Kernel{Fused: steps}
	var outs []int
	for i, op := range group[:len(group)-1] {
		if returned[op.Results[0]] {
			k.Outputs = append(k.Outputs, i)
			outs = append(outs, slot[op.Results[0]])
		}
	}
	if len(outs) > 0 {
		k.Outputs = append(k.Outputs, len(steps)-1)
	}
	outs = append(outs, slot[root.Results[0]])
	switch {
	case op != nil:
		k.Op, k.Attrs, k.OpInputs = op.Def, op.Attrs, len(op.Operands)
		k.withPre(pre)
		inputs = append(b.opInputs(op, slot, pre), inputs...)
	case len(steps) == 1:
		// A lone elementwise op stays a plain launch of its op; the device runs it with the
		// same elementwise engine.
		k = Kernel{Op: root.Def, Attrs: root.Attrs}
		inputs = inputs[:0]
		for _, x := range root.Operands {
			inputs = append(inputs, slot[x])
		}
	}
	return &launchParts{k: k, in: inputs, out: outs}
}
