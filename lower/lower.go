package lower

import (
	"fmt"

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
	// OpInputs is, for an epilogue, how many of the launch's inputs are the op's operands:
	// the chain's input 0 is the op's result and its inputs 1, 2, … the launch's inputs from
	// OpInputs on.
	OpInputs int
}

// Epilogue reports whether the kernel is an op followed by an elementwise chain.
func (k *Kernel) Epilogue() bool { return k.Op != nil && len(k.Fused) > 0 }

// Name is the op name, "fused(add,mul,…)", or for an epilogue the op's and its steps'
// ("conv+relu", "conv+add+relu").
func (k *Kernel) Name() string {
	if k.Op != nil {
		s := k.Op.Name
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
	done := map[*ir.Op]bool{}
	for _, op := range f.Ops {
		if done[op] {
			continue // in an epilogue, emitted with its op
		}
		if root, ok := epi[op]; ok {
			group := append(members[root], root)
			for _, m := range group {
				done[m] = true
				if (m == root || returned[m.Results[0]]) && newSlot(m.Results[0]) < 0 {
					return nil, fmt.Errorf("%s: result of %s has no known type; run shape-infer", m.Loc, m.Def.Name)
				}
			}
			b.fuse(group, slot, returned, op)
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
			l := Launch{Kernel: len(b.Kernels)}
			b.Kernels = append(b.Kernels, Kernel{Op: op.Def, Attrs: op.Attrs})
			for _, x := range op.Operands {
				l.In = append(l.In, slot[x])
			}
			for _, r := range op.Results {
				l.Out = append(l.Out, slot[r])
			}
			b.Launches = append(b.Launches, l)
			continue
		}
		b.fuse(group, slot, returned, nil)
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

// fuse emits one kernel for an elementwise group whose last member is the root, writing the
// root's result and, before it, every member's the function returns. With op, the group is
// op's epilogue: the launch reads op's operands first, and the chain's input 0 is op's result.
func (b *Block) fuse(group []*ir.Op, slot map[*ir.Value]int, returned map[*ir.Value]bool, op *ir.Op) {
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
		opIn := make([]int, len(op.Operands))
		for i, x := range op.Operands {
			opIn[i] = slot[x]
		}
		inputs = append(opIn, inputs...)
	case len(steps) == 1:
		// A lone elementwise op stays a plain launch of its op; the device runs it with the
		// same elementwise engine.
		k = Kernel{Op: root.Def, Attrs: root.Attrs}
		inputs = inputs[:0]
		for _, x := range root.Operands {
			inputs = append(inputs, slot[x])
		}
	}
	b.Kernels = append(b.Kernels, k)
	b.Launches = append(b.Launches, Launch{Kernel: len(b.Kernels) - 1, In: inputs, Out: outs})
}
