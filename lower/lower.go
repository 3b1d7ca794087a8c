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

// Kernel is what one launch computes: an IR op, or (Op nil) a fused elementwise chain.
// Outputs are the steps of a fused chain whose results the launch writes, in the order of
// its Out slots; nil means the last step alone.
type Kernel struct {
	Op      *ir.OpDef
	Attrs   ir.Attrs
	Fused   []FusedStep
	Outputs []int
}

// Name is the op name, or "fused(add,mul,…)".
func (k *Kernel) Name() string {
	if k.Op != nil {
		return k.Op.Name
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
	for _, op := range f.Ops {
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
		b.fuse(group, slot, returned)
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

// fuse emits one kernel for an elementwise group whose last member is the root, writing the
// root's result and, before it, every member's the function returns.
func (b *Block) fuse(group []*ir.Op, slot map[*ir.Value]int, returned map[*ir.Value]bool) {
	root := group[len(group)-1]
	inGroup := map[*ir.Value]int{} // value → step index
	var inputs []int
	inputIdx := map[int]int{}
	var steps []FusedStep
	for _, op := range group {
		st := FusedStep{Op: op.Def, Attrs: op.Attrs, Type: op.Results[0].Type}
		for _, x := range op.Operands {
			if k, ok := inGroup[x]; ok {
				st.Args = append(st.Args, -1-k) // fixed up below once the input count is known
				continue
			}
			s := slot[x]
			i, ok := inputIdx[s]
			if !ok {
				i = len(inputs)
				inputIdx[s] = i
				inputs = append(inputs, s)
			}
			st.Args = append(st.Args, i)
		}
		inGroup[op.Results[0]] = len(steps)
		steps = append(steps, st)
	}
	for i := range steps {
		for j, a := range steps[i].Args {
			if a < 0 {
				steps[i].Args[j] = len(inputs) + (-1 - a)
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
	if len(steps) == 1 {
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
