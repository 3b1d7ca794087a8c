package passes

import (
	"fmt"
	"slices"

	"ppc.dev/ppc/ir"
)

// ParamGather writes ZeRO-3's parameter gathers into the per-stage functions.
var ParamGather = &Pass{
	Name: "param-gather",
	Doc: "After split-stages, under ZeRO-3 (@optimizer {zero = 3}: every parameter with a first dim is held " +
		"by each dp replica as its block of dim 0, @optimizer's argument for it the block): each per-stage function " +
		"(F, I, W, and so every recomputation, which I and W do inside them) takes such a parameter as the block — " +
		"its argument's type and shard become @optimizer's — and all-gathers it over dp where it reads it, " +
		"`%<name>.gathered = all_gather %<name> {axis = dp, dim = 0, parts = dp}` — a padded block (zero_rows: dp does " +
		"not divide the rows) gathers ceil(rows/dp)·dp rows and `slice`s off the padding, a view of the gathered copy's " +
		"leading rows — so the whole parameter lives in " +
		"the arena only from its gather to its last reader in that run (the memory plan frees it there) and is gathered " +
		"again by the next function that reads it — FSDP's gather before the forward and again before the backward. " +
		"The gathers are grouped by layer (the partition's parameter namespaces: h3.*, layers.3.*; parameters " +
		"outside the layers group with their neighbours in first-use order) and each group's gathers are placed just " +
		"before the first op reading the group before it, so the next layer's gather is issued while this layer " +
		"computes (FSDP's prefetch, by placement: it overlaps where the device runs collectives on a stream of their own) and at most two " +
		"layers are whole at once. A parameter read only through casts to one dtype (mixed precision's 16-bit copy) " +
		"is cast as a block and gathered in that dtype: half the bytes, the same values. The gradient leaves W whole " +
		"and is reduce-scattered right after the op computing it, padded with zeros to ceil(rows/dp)·dp rows first where dp " +
		"does not divide them (`pad`), and the run returns the block; the optimizer updates the block in place and " +
		"nothing is gathered after it (rank-optimizer). Scalars and expert shards are held whole.",
	Run: runParamGather,
}

// zero3Blocks maps each parameter ZeRO-3 holds as a dp block to @optimizer's argument for it
// (the block's type and shard attribute), and returns the dp size.
func zero3Blocks(m *ir.Module) (map[string]int, int) {
	zero, dp := zeroBlocks(m)
	opt := m.Func(OptimizerFunc)
	out := map[string]int{}
	if opt == nil || dp <= 1 {
		return out, dp
	}
	for i, a := range opt.Args {
		if opt.ArgAttrs[i].Has(ir.AttrParam) && zero[a.Name] == 3 {
			out[a.Name] = i
		}
	}
	return out, dp
}

func runParamGather(m *ir.Module, _ Options) error {
	blocks, dp := zero3Blocks(m)
	if len(blocks) == 0 {
		return nil
	}
	opt := m.Func(OptimizerFunc)
	for _, f := range m.Funcs {
		if f.Attrs.Str("kind", "") == "" {
			continue
		}
		block := map[*ir.Value]int{} // a block parameter → the rows of its whole copy
		for i, a := range f.Args {
			j, ok := blocks[a.Name]
			if !ok || !f.ArgAttrs[i].Has(ir.AttrParam) {
				continue
			}
			oa := opt.Args[j]
			if a.Type.Rank() == 0 || ZeroBlockRows(a.Type.Shape[0], dp) != oa.Type.Shape[0] || !slices.Equal(a.Type.Shape[1:], oa.Type.Shape[1:]) {
				return fmt.Errorf("@%s: parameter %%%s is %s, @%s's block %s is not its block over dp %d", f.Name, a.Name, a.Type, OptimizerFunc, oa.Type, dp)
			}
			block[a] = a.Type.Shape[0]
			a.Type = oa.Type
			f.ArgAttrs[i] = f.ArgAttrs[i].Set(ir.AttrShard, opt.ArgAttrs[j].Get(ir.AttrShard))
			if r := opt.ArgAttrs[j].Get(ir.AttrZeroRows); r != nil {
				f.ArgAttrs[i] = f.ArgAttrs[i].Set(ir.AttrZeroRows, r)
			}
		}
		if len(block) > 0 {
			gatherParams(f, block, dp)
		}
		scatterGrads(m, f, func(name string) bool { _, ok := blocks[name]; return ok }, dp)
	}
	return nil
}

// scatterGrads reduce-scatters over dp, right after the op computing it, each gradient f
// returns of a parameter held as blocks, and returns the block instead: a run holds one whole
// gradient at a time, and the rank accumulates only its block. A 16-bit gradient accumulated
// in fp32 (the recipe's default, accType) is widened first, so that the sum over dp is taken
// in fp32 as ZeRO-2's reduce-scatter takes it. A gradient whose rows dp does not divide is
// padded with zero rows to a multiple of dp first: the padding's blocks sum to zero.
func scatterGrads(m *ir.Module, f *ir.Func, isBlock func(string) bool, dp int) {
	rs, pad := ir.MustLookup("reduce_scatter"), ir.MustLookup("pad")
	cast := ir.MustLookup("cast")
	after := map[*ir.Op][]*ir.Op{}
	for i, r := range f.Results {
		name := f.ResultAttrs[i].Str(ir.AttrGrad, "")
		if name == "" || !isBlock(name) || r.Def == nil || r.Type.Rank() == 0 {
			continue
		}
		src := r
		if acc := accType(m, r.Type); acc.DType != r.Type.DType {
			c := ir.NewOp(cast, []*ir.Value{r}, ir.Attrs{{Name: "to", Value: ir.Ident(acc.DType.String())}}, []ir.Type{acc})
			annotate(c, r.Def)
			after[r.Def] = append(after[r.Def], c)
			src = c.Results[0]
		}
		n := ZeroBlockRows(src.Type.Shape[0], dp)
		if extra := n*dp - src.Type.Shape[0]; extra > 0 {
			pads := make([]int, 2*src.Type.Rank())
			pads[src.Type.Rank()] = extra
			t := src.Type
			t.Shape = slices.Clone(t.Shape)
			t.Shape[0] = n * dp
			p := ir.NewOp(pad, []*ir.Value{src}, ir.Attrs{{Name: "pads", Value: ir.Ints(pads...)}}, []ir.Type{t})
			annotate(p, r.Def)
			after[r.Def] = append(after[r.Def], p)
			src = p.Results[0]
		}
		t := src.Type
		t.Shape = slices.Clone(t.Shape)
		t.Shape[0] = n
		op := ir.NewOp(rs, []*ir.Value{src}, ir.Attrs{{Name: "axis", Value: ir.Ident("dp")}, {Name: "dim", Value: ir.Int(0)}, {Name: "parts", Value: ir.Int(dp)}}, []ir.Type{t})
		op.Results[0].Name = "d." + name + ".block"
		annotate(op, r.Def)
		after[r.Def] = append(after[r.Def], op)
		f.Results[i] = op.Results[0]
	}
	if len(after) == 0 {
		return
	}
	ops := make([]*ir.Op, 0, len(f.Ops)+len(after))
	for _, op := range f.Ops {
		ops = append(ops, op)
		ops = append(ops, after[op]...)
	}
	f.Ops = ops
}

// gatherParams rewrites f to read whole copies of the block parameters, gathered per
// segment: a maximal run of the ops reading them whose parameters belong to one layer (the
// same layerOfParam). A parameter read through a cast of it (one op whose only operand is
// the parameter) is read as that dtype: the block is cast and the copy gathered. Each
// segment gathers each (parameter, dtype) it reads once; its gathers are placed before the
// first reader of the segment before it (prefetch), the first segment's before its own. A
// padded block's gathered copy has ceil(rows/dp)·dp rows and is sliced to the parameter's
// rows (block maps each block to them), a view of its leading rows (codegen).
func gatherParams(f *ir.Func, block map[*ir.Value]int, dp int) {
	// The casts of block parameters are transparent: their readers read the parameter.
	castOf := map[*ir.Value]*ir.Op{}
	for _, op := range f.Ops {
		if op.Name() != "cast" {
			continue
		}
		if _, ok := block[op.Operands[0]]; ok {
			castOf[op.Results[0]] = op
		}
	}
	returned := map[*ir.Value]bool{}
	for _, r := range f.Results {
		returned[r] = true
	}
	type key struct {
		p  *ir.Value
		dt ir.DType
	}
	type segment struct {
		layer  int
		first  int // index of its first reader
		keys   []key
		copies map[key]*ir.Value
	}
	var segs []*segment
	type read struct {
		op   int
		slot int
		k    key
	}
	var reads []read
	segOf := map[int]*segment{} // reader op index → its segment
	for i, op := range f.Ops {
		if castOf[resultOrNil(op)] != nil && !returned[resultOrNil(op)] {
			continue // a cast of a parameter: its readers read the parameter
		}
		for j, x := range op.Operands {
			k := key{x, x.Type.DType}
			if c := castOf[x]; c != nil {
				k = key{c.Operands[0], x.Type.DType}
			} else if _, ok := block[x]; !ok {
				continue
			}
			layer := layerOfParam(k.p.Name)
			cur := segOf[i]
			if cur == nil {
				if n := len(segs); n > 0 && segs[n-1].layer == layer {
					cur = segs[n-1]
				} else {
					cur = &segment{layer: layer, first: i, copies: map[key]*ir.Value{}}
					segs = append(segs, cur)
				}
				segOf[i] = cur
			}
			if _, ok := cur.copies[k]; !ok {
				cur.copies[k] = nil
				cur.keys = append(cur.keys, k)
			}
			reads = append(reads, read{i, j, k})
		}
	}
	gather, cast, slice := ir.MustLookup("all_gather"), ir.MustLookup("cast"), ir.MustLookup("slice")
	before := map[int][]*ir.Op{} // op index → the ops placed before it
	for g, sg := range segs {
		at := sg.first
		if g > 0 {
			at = segs[g-1].first // prefetch: while the segment before it computes
		}
		anchor := f.Ops[sg.first]
		for _, k := range sg.keys {
			src := k.p
			if k.dt != k.p.Type.DType {
				c := ir.NewOp(cast, []*ir.Value{src}, ir.Attrs{{Name: "to", Value: ir.Ident(k.dt.String())}}, []ir.Type{{DType: k.dt, Shape: src.Type.Shape}})
				annotate(c, anchor)
				before[at] = append(before[at], c)
				src = c.Results[0]
			}
			t := src.Type
			t.Shape = slices.Clone(t.Shape)
			t.Shape[0] *= dp
			op := ir.NewOp(gather, []*ir.Value{src}, ir.Attrs{{Name: "axis", Value: ir.Ident("dp")}, {Name: "dim", Value: ir.Int(0)}, {Name: "parts", Value: ir.Int(dp)}}, []ir.Type{t})
			op.Results[0].Name = k.p.Name + ".gathered"
			annotate(op, anchor)
			before[at] = append(before[at], op)
			sg.copies[k] = op.Results[0]
			if rows := block[k.p]; rows != t.Shape[0] {
				// The padding dropped: the parameter's rows, the gathered copy's leading ones.
				w := t
				w.Shape = slices.Clone(t.Shape)
				w.Shape[0] = rows
				s := ir.NewOp(slice, []*ir.Value{op.Results[0]}, ir.Attrs{{Name: "axes", Value: ir.Ints(0)}, {Name: "ends", Value: ir.Ints(rows)}, {Name: "starts", Value: ir.Ints(0)}}, []ir.Type{w})
				s.Results[0].Name = k.p.Name + ".whole"
				annotate(s, anchor)
				before[at] = append(before[at], s)
				sg.copies[k] = s.Results[0]
			}
		}
	}
	for _, r := range reads {
		f.Ops[r.op].Operands[r.slot] = segOf[r.op].copies[r.k]
	}
	// The casts of the parameters now have no reader (a returned one reads a copy).
	used := map[*ir.Value]bool{}
	for _, op := range f.Ops {
		for _, x := range op.Operands {
			used[x] = true
		}
	}
	ops := make([]*ir.Op, 0, len(f.Ops)+2*len(reads))
	for i, op := range f.Ops {
		ops = append(ops, before[i]...)
		if c := castOf[resultOrNil(op)]; c != nil && !used[resultOrNil(op)] && !returned[resultOrNil(op)] {
			continue
		}
		ops = append(ops, op)
	}
	f.Ops = ops
}

// annotate gives an op the stage, token slice and phase of the op it serves.
func annotate(op, like *ir.Op) {
	op.Stage, op.Slice, op.Phase = like.Stage, like.Slice, like.Phase
}

// GatherAsZero3 rewrites the per-stage functions of m (a module after split-stages, for
// instance a planner's probe) as param-gather would under ZeRO-3 over dp replicas: every
// parameter argument with a first dim becomes its block (padded where dp does not divide
// it) and is gathered where it is read. The mesh gets the dp axis. It lets `ppc plan` measure the runs' arena with the
// gathered copies, as code generation will lay them out.
func GatherAsZero3(m *ir.Module, dp int) {
	mesh := m.Mesh()
	mesh = slices.DeleteFunc(mesh, func(a ir.MeshAxis) bool { return a.Name == "dp" })
	m.SetMesh(append(mesh, ir.MeshAxis{Name: "dp", Size: dp}))
	if opt := m.Func(OptimizerFunc); opt != nil {
		opt.Attrs = opt.Attrs.Set(AttrZero, ir.Int(3))
	}
	for _, f := range m.Funcs {
		// Every function takes the blocks (@optimizer as the optimizer pass would give it
		// them); the per-stage functions gather them.
		block := map[*ir.Value]int{}
		for i, a := range f.Args {
			if !f.ArgAttrs[i].Has(ir.AttrParam) || a.Type.Rank() == 0 {
				continue
			}
			block[a] = a.Type.Shape[0]
			if a.Type.Shape[0]%dp != 0 {
				f.ArgAttrs[i] = f.ArgAttrs[i].Set(ir.AttrZeroRows, ir.Int(a.Type.Shape[0]))
			}
			var shard ir.Attr
			if m.Attrs.Has(ir.AttrPartitioned) {
				shard = f.ArgAttrs[i].Get(ir.AttrShard)
			}
			a.Type.Shape = slices.Clone(a.Type.Shape)
			a.Type.Shape[0] = ZeroBlockRows(a.Type.Shape[0], dp)
			f.ArgAttrs[i] = f.ArgAttrs[i].Set(ir.AttrShard, zeroSharding(shard, a.Type.Rank()).Attr())
		}
		if f.Attrs.Str("kind", "") != "" {
			if len(block) > 0 {
				gatherParams(f, block, dp)
			}
			scatterGrads(m, f, func(string) bool { return true }, dp)
		}
	}
}

// LayerOfParam is the layer index of a namespaced parameter name (layers.3.…, h.3.…), or −1:
// the partition's units and param-gather's segments follow it.
func LayerOfParam(name string) int { return layerOfParam(name) }
