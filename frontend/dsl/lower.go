package dsl

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"ppc.dev/ppc/ir"
)

// Limits that keep hostile or mistaken input from hanging the importer.
const (
	// maxElements bounds the element count of any tensor type (2^50, as ir's reshape does).
	maxElements = 1 << 50
	// maxRepeat bounds one repeat's count.
	maxRepeat = 100_000
	// maxConfigDepth bounds chains of config constants defined in terms of each other.
	maxConfigDepth = 1000
	// maxCallDepth bounds nested block calls.
	maxCallDepth = 200
)

// maxWork bounds the statements executed plus ops built by one import: far above any real
// model (gpt3-175b needs about 10,000), far below a hang. The fuzz test lowers it.
var maxWork = 2_000_000

// Evaluation states of a config constant.
const (
	cfgPending = iota
	cfgBusy
	cfgDone
)

type cfgEntry struct {
	name  string
	decl  *entryAST  // the declaration in `config`
	expr  *exprAST   // the expression in force (config, preset or --set)
	under []*exprAST // the expressions it overrides, oldest first: `--set batch=batch*2`
	state int
	v     val
}

type inputInfo struct {
	ast   *inputAST
	v     *ir.Value
	attrs ir.Attrs
}

type paramInfo struct {
	name     string
	at       pos
	v        *ir.Value
	attrs    ir.Attrs
	firstUse int // 0 until used
}

// scope is the variable environment of forward or of one block call.
type scope struct {
	vars   map[string]val
	ns     string    // parameter namespace ("" in forward, "layers.3.attn" in a block)
	block  *blockAST // nil in forward
	config bool      // a config expression: only config constants and literals
	// In a config expression that overrides another (a preset's or --set's), the constant's
	// own name means the value it overrides.
	self  *cfgEntry
	layer int
}

type lowerer struct {
	file string
	srcs sources
	ast  *fileAST
	opts Options

	cfg        map[string]*cfgEntry
	cfgNames   []string
	cfgDepth   int
	presetUsed string

	inputs     map[string]*inputInfo
	inputOrder []*inputInfo
	blocks     map[string]*blockAST
	forward    *forwardAST

	fn *ir.Func
	b  *ir.Builder

	params  map[string]*paramInfo
	byValue map[*ir.Value]*paramInfo
	uses    int

	stage, markers, stageOps int
	lastMarker               pos

	weak    map[*ir.Value]bool // values named after a block call, renamed by an assignment
	calls   []string           // block call stack
	repeats int                // enclosing repeat loops
	work    int

	loss     *ir.Value
	lossAt   pos
	outputs  []output
	metrics  []output // `metric NAME EXPR`: f32 scalars, summed per step
	outNames map[string]pos
}

type output struct {
	name string
	v    *ir.Value
}

func newLowerer(file string, srcs sources, f *fileAST, opts Options) *lowerer {
	return &lowerer{
		file: file, srcs: srcs, ast: f, opts: opts,
		cfg:      map[string]*cfgEntry{},
		inputs:   map[string]*inputInfo{},
		blocks:   map[string]*blockAST{},
		params:   map[string]*paramInfo{},
		byValue:  map[*ir.Value]*paramInfo{},
		outNames: map[string]pos{},
		weak:     map[*ir.Value]bool{},
	}
}

func (l *lowerer) errorf(p pos, format string, args ...any) error {
	return l.srcs.errorAt(p, format, args...)
}

// fileError is a diagnostic about the whole file (no position to point at).
func (l *lowerer) fileError(format string, args ...any) error {
	return &ir.Error{Loc: ir.Loc{File: l.file}, Msg: fmt.Sprintf(format, args...)}
}

// reserved names cannot be assigned or declared.
func reserved(name string) bool {
	switch name {
	case "true", "false", "pi", "inf":
		return true
	}
	_, ok := ir.ParseDType(name)
	return ok
}

// lower runs the whole import.
func (l *lowerer) lower() (*ir.Module, error) {
	if err := l.declarations(); err != nil {
		return nil, err
	}
	if err := l.resolveConfig(); err != nil {
		return nil, err
	}
	l.fn = ir.NewFunc(ir.ForwardFunc)
	l.fn.Loc = l.srcs.loc(l.forward.Pos)
	l.b = ir.NewBuilder(l.fn)
	if err := l.declareInputs(); err != nil {
		return nil, err
	}
	sc := &scope{vars: map[string]val{}}
	if _, _, err := l.execBody(sc, l.forward.Body); err != nil {
		return nil, err
	}
	if err := l.finish(); err != nil {
		return nil, err
	}
	m := &ir.Module{Name: l.ast.Model.Name, Funcs: []*ir.Func{l.fn}, Source: &ir.Source{Name: l.file, Text: l.srcs[l.file]}}
	m.Attrs = l.moduleAttrs()
	return m, nil
}

// declarations indexes the top-level declarations and checks their names.
func (l *lowerer) declarations() error {
	seenPreset := map[string]bool{}
	var presets []*presetAST
	for _, d := range l.ast.Decls {
		switch {
		case d.Config != nil:
			for _, e := range d.Config.Entries {
				if reserved(e.Name) {
					return l.errorf(e.Pos, "%s is reserved and cannot name a config constant", e.Name)
				}
				if prev := l.cfg[e.Name]; prev != nil {
					return l.errorf(e.Pos, "config constant %s declared twice (first at %s)", e.Name, l.srcs.loc(prev.decl.Pos))
				}
				l.cfg[e.Name] = &cfgEntry{name: e.Name, decl: e, expr: e.Value}
				l.cfgNames = append(l.cfgNames, e.Name)
			}
		case d.Preset != nil:
			name := presetName(d.Preset)
			if seenPreset[name] {
				return l.errorf(d.Preset.Pos, "preset %s declared twice", name)
			}
			seenPreset[name] = true
			presets = append(presets, d.Preset)
		case d.Block != nil:
			name := d.Block.Name.Name
			if builtins[name] != nil {
				return l.errorf(d.Block.Name.Pos, "block %s has the name of a builtin", name)
			}
			if reserved(name) {
				return l.errorf(d.Block.Name.Pos, "%s is reserved and cannot name a block", name)
			}
			if prev := l.blocks[name]; prev != nil {
				return l.errorf(d.Block.Name.Pos, "block %s declared twice (first at %s)", name, l.srcs.loc(prev.Pos))
			}
			seen := map[string]bool{}
			for _, p := range d.Block.Params {
				if seen[p.Name] {
					return l.errorf(p.Pos, "block %s has two parameters named %s", name, p.Name)
				}
				if reserved(p.Name) {
					return l.errorf(p.Pos, "%s is reserved and cannot name a parameter", p.Name)
				}
				seen[p.Name] = true
			}
			l.blocks[name] = d.Block
		case d.Forward != nil:
			if l.forward != nil {
				return l.errorf(d.Forward.Pos, "forward declared twice (first at %s)", l.srcs.loc(l.forward.Pos))
			}
			l.forward = d.Forward
		}
	}
	for _, d := range l.ast.Decls {
		if in := d.Input; in != nil {
			name := in.Name.Name
			switch {
			case reserved(name):
				return l.errorf(in.Name.Pos, "%s is reserved and cannot name an input", name)
			case l.inputs[name] != nil:
				return l.errorf(in.Name.Pos, "input %s declared twice (first at %s)", name, l.srcs.loc(l.inputs[name].ast.Pos))
			case l.cfg[name] != nil:
				return l.errorf(in.Name.Pos, "input %s has the name of a config constant", name)
			}
			info := &inputInfo{ast: in}
			l.inputs[name] = info
			l.inputOrder = append(l.inputOrder, info)
		}
	}
	if l.forward == nil {
		return l.fileError("model %s has no forward { … } section", l.ast.Model.Name)
	}
	// Overrides: the preset, then --set.
	if l.opts.Preset != "" {
		var chosen *presetAST
		names := make([]string, len(presets))
		for i, p := range presets {
			names[i] = presetName(p)
			if names[i] == l.opts.Preset {
				chosen = p
			}
		}
		if chosen == nil {
			if len(names) == 0 {
				return l.fileError("unknown preset %q: model %s declares no presets", l.opts.Preset, l.ast.Model.Name)
			}
			return l.fileError("unknown preset %q; model %s has presets: %s", l.opts.Preset, l.ast.Model.Name, strings.Join(names, ", "))
		}
		l.presetUsed = l.opts.Preset
		set := map[string]bool{}
		for _, e := range chosen.Entries {
			c := l.cfg[e.Name]
			if c == nil {
				return l.errorf(e.Pos, "preset %s sets %s, which is not a config constant (%s)", l.presetUsed, e.Name, l.validConfig())
			}
			if set[e.Name] {
				return l.errorf(e.Pos, "preset %s sets %s twice", l.presetUsed, e.Name)
			}
			set[e.Name] = true
			c.under, c.expr = append(c.under, c.expr), e.Value
		}
	}
	keys := make([]string, 0, len(l.opts.Set))
	for k := range l.opts.Set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		c := l.cfg[k]
		if c == nil {
			return l.fileError("--set %s: unknown config constant (%s)", k, l.validConfig())
		}
		name := "--set " + k
		l.srcs[name] = l.opts.Set[k]
		e, err := parseExpr(name, l.opts.Set[k], l.srcs)
		if err != nil {
			return err
		}
		c.under, c.expr = append(c.under, c.expr), e
	}
	return nil
}

func presetName(p *presetAST) string {
	if s, err := strconv.Unquote(p.Name); err == nil {
		return s
	}
	return p.Name
}

func (l *lowerer) validConfig() string {
	if len(l.cfgNames) == 0 {
		return "the model has no config constants"
	}
	names := slices.Clone(l.cfgNames)
	sort.Strings(names)
	return "valid names: " + strings.Join(names, ", ")
}

// resolveConfig evaluates every config constant (each lazily, so order does not matter).
func (l *lowerer) resolveConfig() error {
	m := l.opts.Microbatches
	if m < 0 {
		return l.fileError("micro-batch count must be positive, got %d", m)
	}
	if m > 1 && l.cfg["batch"] == nil {
		return l.fileError("cannot split into %d micro-batches: model %s has no config constant `batch`", m, l.ast.Model.Name)
	}
	for _, name := range l.cfgNames {
		if _, err := l.config(name, l.cfg[name].decl.Pos); err != nil {
			return err
		}
	}
	return nil
}

// config returns the value of a config constant, evaluating it on first use.
func (l *lowerer) config(name string, at pos) (val, error) {
	c := l.cfg[name]
	switch c.state {
	case cfgDone:
		return c.v, nil
	case cfgBusy:
		return val{}, l.errorf(at, "config constant %s is defined in terms of itself", name)
	}
	if l.cfgDepth >= maxConfigDepth {
		return val{}, l.errorf(at, "config constants nest too deeply (more than %d)", maxConfigDepth)
	}
	c.state = cfgBusy
	l.cfgDepth++
	v, err := l.eval(&scope{config: true, self: c, layer: len(c.under)}, c.expr)
	l.cfgDepth--
	if err != nil {
		return val{}, err
	}
	switch v.k {
	case kInt, kFloat, kBool:
	default:
		return val{}, l.errorf(c.expr.Pos, "config constant %s must be a number or a bool, got %s", name, v.describe())
	}
	if m := l.opts.Microbatches; name == "batch" && m > 1 {
		if v.k != kInt || v.i <= 0 {
			return val{}, l.errorf(c.expr.Pos, "cannot split batch %s into %d micro-batches: batch must be a positive integer", v.String(), m)
		}
		if v.i < int64(m) {
			// A batch grown to the micro-batch count is not what someone asking for
			// more micro-batches than sequences needs to hear first.
			return val{}, l.errorf(c.expr.Pos, "global batch %d does not divide into %d micro-batches%s: a micro-batch needs a sequence at least; micro-batch counts that divide it: %s",
				v.i, m, replicaNote(m, l.opts.Replicas), divisorList(v.i))
		}
		if v.i%int64(m) != 0 {
			return val{}, l.errorf(c.expr.Pos, "global batch %d does not divide into %d micro-batches%s; batch sizes that do: %s", v.i, m, replicaNote(m, l.opts.Replicas), nearestBatch(v.i, int64(m)))
		}
		v.i /= int64(m)
	}
	c.v, c.state = v, cfgDone
	return v, nil
}

func (l *lowerer) moduleAttrs() ir.Attrs {
	cfg := make(ir.Attrs, 0, len(l.cfgNames))
	for _, name := range l.cfgNames {
		v := l.cfg[name].v
		var a ir.Attr
		switch v.k {
		case kInt:
			a = ir.Int(v.i)
		case kFloat:
			a = ir.Float(v.f)
		default:
			a = ir.BoolAttr(v.b)
		}
		cfg = append(cfg, ir.NamedAttr{Name: name, Value: a})
	}
	var at ir.Attrs
	if len(cfg) > 0 {
		at = at.Set("config", ir.Dict(cfg.Sorted()))
	}
	if l.presetUsed != "" {
		at = at.Set("preset", ir.String(l.presetUsed))
	}
	at = at.Set("microbatches", ir.Int(max(l.opts.Microbatches, 1)))
	return at
}

// declareInputs adds the data inputs as the first arguments of @forward.
func (l *lowerer) declareInputs() error {
	sc := &scope{config: true}
	for _, info := range l.inputOrder {
		in := info.ast
		t, err := l.evalType(sc, in.Type)
		if err != nil {
			return err
		}
		attrs := ir.Attrs{{Name: ir.AttrInput, Value: ir.Unit{}}}
		if in.Kind == "label" {
			attrs = attrs.Set(ir.AttrLabel, ir.Unit{})
		}
		if in.Range != nil {
			if !t.DType.IsInt() {
				return l.errorf(in.Range.Pos, "only integer inputs take a range; %s is %s", in.Name.Name, t)
			}
			lo, err := l.evalInt(sc, in.Range.Lo, "range start")
			if err != nil {
				return err
			}
			hi, err := l.evalInt(sc, in.Range.Hi, "range end")
			if err != nil {
				return err
			}
			if lo >= hi {
				return l.errorf(in.Range.Pos, "empty range [%d, %d)", lo, hi)
			}
			attrs = attrs.Set("range", ir.List{ir.Int(lo), ir.Int(hi)})
		} else if t.DType.IsInt() {
			return l.errorf(in.Type.Pos, "integer input %s needs a range: `in [lo, hi)`", in.Name.Name)
		}
		if in.NextOf != nil {
			if in.Kind != "label" {
				return l.errorf(in.NextOf.Pos, "`next of` describes labels; declare %s with `label`", in.Name.Name)
			}
			src := l.inputs[in.NextOf.Name]
			switch {
			case src == nil || src.v == nil:
				return l.errorf(in.NextOf.Pos, "`next of %s`: no input %s is declared before %s", in.NextOf.Name, in.NextOf.Name, in.Name.Name)
			case !src.v.Type.Equal(t):
				return l.errorf(in.NextOf.Pos, "labels %s %s must have the type of %s %s", in.Name.Name, t, in.NextOf.Name, src.v.Type)
			}
			attrs = attrs.Set("shift_of", ir.String(in.NextOf.Name))
		}
		info.v, info.attrs = l.fn.AddArg(in.Name.Name, t, attrs), attrs
	}
	return nil
}

// finish orders the arguments, attaches the results and the stage annotations.
func (l *lowerer) finish() error {
	params := make([]*paramInfo, 0, len(l.params))
	for _, p := range l.params {
		if p.firstUse == 0 {
			return l.unusedParam()
		}
		params = append(params, p)
	}
	sort.Slice(params, func(i, j int) bool { return params[i].firstUse < params[j].firstUse })
	f := l.fn
	f.Args, f.ArgAttrs = f.Args[:0], f.ArgAttrs[:0]
	for _, in := range l.inputOrder {
		f.Args = append(f.Args, in.v)
		f.ArgAttrs = append(f.ArgAttrs, in.attrs)
	}
	for _, p := range params {
		f.Args = append(f.Args, p.v)
		f.ArgAttrs = append(f.ArgAttrs, p.attrs)
	}
	for i, a := range f.Args {
		a.Index = i
	}
	switch {
	case l.loss != nil:
		f.AddResult(l.loss, ir.Attrs{{Name: ir.AttrLoss, Value: ir.Unit{}}})
	case len(l.outputs) > 0:
		for _, o := range l.outputs {
			f.AddResult(o.v, ir.Attrs{{Name: ir.AttrName, Value: ir.String(o.name)}})
		}
	default:
		return l.errorf(l.forward.Pos, "forward declares neither a loss (`loss EXPR`) nor an output (`output NAME = EXPR`)")
	}
	for _, mt := range l.metrics {
		f.AddResult(mt.v, ir.Attrs{{Name: ir.AttrMetric, Value: ir.String(mt.name)}})
	}
	if l.markers == 0 {
		for _, op := range f.Ops {
			op.Stage = ir.NoStage
		}
	} else if l.stageOps == 0 {
		return l.errorf(l.lastMarker, "stage %d is empty: nothing follows this stage marker", l.stage)
	}
	return nil
}

// unusedParam reports the first-declared parameter that no op uses.
func (l *lowerer) unusedParam() error {
	var first *paramInfo
	for _, p := range l.params {
		if p.firstUse == 0 && (first == nil || p.v.Index < first.v.Index) {
			first = p
		}
	}
	return l.errorf(first.at, "parameter %s is declared but never used", first.name)
}

// tick counts one unit of work and stops runaway imports.
func (l *lowerer) tick(p pos) error {
	l.work++
	if l.work > maxWork {
		return l.errorf(p, "model too large: the import exceeds %d steps (check repeat counts)", maxWork)
	}
	return nil
}

// opN builds an op at p, in the current stage.
func (l *lowerer) opN(p pos, name string, attrs ir.Attrs, operands ...*ir.Value) ([]*ir.Value, error) {
	if err := l.tick(p); err != nil {
		return nil, err
	}
	l.b.Loc = l.srcs.loc(p)
	l.b.Stage = l.stage
	rs := l.b.Op(name, attrs, operands...)
	if err := l.b.Err(); err != nil {
		var e *ir.Error
		if errors.As(err, &e) && e.Line == "" && e.Loc.Line > 0 {
			e.Line = ir.SourceLine(l.srcs[e.Loc.File], e.Loc.Line)
		}
		return nil, err
	}
	for _, v := range operands {
		if pi := l.byValue[v]; pi != nil && pi.firstUse == 0 {
			l.uses++
			pi.firstUse = l.uses
		}
	}
	l.stageOps++
	return rs, nil
}

func (l *lowerer) op(p pos, name string, attrs ir.Attrs, operands ...*ir.Value) (*ir.Value, error) {
	rs, err := l.opN(p, name, attrs, operands...)
	if err != nil {
		return nil, err
	}
	if len(rs) != 1 {
		return nil, l.errorf(p, "op %s has %d results", name, len(rs))
	}
	return rs[0], nil
}

// execBody runs the statements of a body. A `return` (only in blocks, and only as the last
// statement of its body) ends the block: returned reports it, with the values.
func (l *lowerer) execBody(sc *scope, body *bodyAST) (ret []val, returned bool, err error) {
	for i, st := range body.Stmts {
		switch {
		case st.Return != nil:
			if sc.block == nil {
				return nil, false, l.errorf(st.Return.Pos, "return outside a block (forward ends with `loss` or `output`)")
			}
			if i != len(body.Stmts)-1 {
				return nil, false, l.errorf(body.Stmts[i+1].pos(), "unreachable statement after return")
			}
			return l.execReturn(sc, st.Return)
		case st.Repeat != nil:
			ret, returned, err = l.execRepeat(sc, st.Repeat)
		case st.If != nil:
			ret, returned, err = l.execIf(sc, st.If)
		default:
			err = l.exec(sc, st)
		}
		if err != nil || returned {
			return ret, returned, err
		}
	}
	return nil, false, nil
}

func (l *lowerer) execReturn(sc *scope, r *returnAST) ([]val, bool, error) {
	var out []val
	for _, e := range r.Values {
		v, err := l.eval(sc, e)
		if err != nil {
			return nil, false, err
		}
		if v.k == kTuple || v.k == kNone {
			return nil, false, l.errorf(e.Pos, "cannot return %s as one value", v.describe())
		}
		out = append(out, v)
	}
	return out, true, nil
}

func (l *lowerer) exec(sc *scope, st *stmtAST) error {
	switch {
	case st.Param != nil:
		return l.execParam(sc, st.Param)
	case st.Stage != nil:
		return l.mark(st.Stage.Pos)
	case st.Loss != nil:
		return l.execLoss(sc, st.Loss)
	case st.Output != nil:
		return l.execOutput(sc, st.Output)
	case st.Metric != nil:
		return l.execMetric(sc, st.Metric)
	case st.Assign != nil:
		return l.execAssign(sc, st.Assign)
	}
	return nil
}

// mark is a stage marker: later ops belong to the next pipeline stage.
func (l *lowerer) mark(p pos) error {
	if err := l.tick(p); err != nil {
		return err
	}
	if l.stageOps == 0 {
		if l.markers == 0 {
			return l.errorf(p, "stage 0 is empty: no op precedes the first stage marker")
		}
		return l.errorf(p, "stage %d is empty: no op between this stage marker and the previous one at %s", l.stage, l.srcs.loc(l.lastMarker))
	}
	l.markers++
	l.stage++
	l.stageOps = 0
	l.lastMarker = p
	return nil
}

func (l *lowerer) execParam(sc *scope, ps *paramAST) error {
	if err := l.tick(ps.Pos); err != nil {
		return err
	}
	local := strings.Join(ps.Name.Parts, ".")
	if reserved(ps.Name.Parts[0]) {
		return l.errorf(ps.Name.Pos, "%s is reserved and cannot name a parameter", ps.Name.Parts[0])
	}
	full := local
	if sc.ns != "" {
		full = sc.ns + "." + local
	}
	if prev := l.params[full]; prev != nil {
		hint := ""
		if l.repeats > 0 {
			hint = "; inside repeat, give each iteration's block call its own scope, e.g. `layer(x) as layers[i]`"
		}
		return l.errorf(ps.Name.Pos, "duplicate parameter %s (first declared at %s)%s", full, l.srcs.loc(prev.at), hint)
	}
	if l.inputs[full] != nil {
		return l.errorf(ps.Name.Pos, "parameter %s has the name of an input", full)
	}
	t, err := l.evalType(sc, ps.Type)
	if err != nil {
		return err
	}
	if !t.DType.IsFloat() {
		return l.errorf(ps.Type.Pos, "parameter %s must have a floating-point type, got %s", full, t)
	}
	init, err := l.evalInit(sc, ps.Init)
	if err != nil {
		return err
	}
	attrs := ir.Attrs{{Name: ir.AttrInit, Value: ir.String(init)}, {Name: ir.AttrParam, Value: ir.Unit{}}}
	if ps.Shard != nil {
		sh, err := l.evalShard(ps.Shard, full, t)
		if err != nil {
			return err
		}
		attrs = attrs.Set(ir.AttrShard, sh.Attr())
	}
	v := l.fn.AddArg(full, t, attrs)
	pi := &paramInfo{name: full, at: ps.Name.Pos, v: v, attrs: attrs}
	l.params[full] = pi
	l.byValue[v] = pi
	sc.vars[local] = tensorVal(v)
	return nil
}

// evalShard checks a user's sharding of a parameter: one entry per dim, each axis a mesh
// axis other than pp (stages are placed by the pipeline, not by shardings) and used once.
// Divisibility waits for the mesh sizes, which come with the compile (--tp, --dp); the
// sharding pass then names the parameter.
func (l *lowerer) evalShard(sa *shardAST, param string, t ir.Type) (*ir.Sharding, error) {
	if len(sa.Dims) != t.Rank() {
		return nil, l.errorf(sa.Pos, "shard of %s lists %d dims, but %s has rank %d", param, len(sa.Dims), t, t.Rank())
	}
	s := &ir.Sharding{Dims: make([][]string, len(sa.Dims))}
	used := map[string]bool{}
	for i, d := range sa.Dims {
		for _, a := range d.Axes {
			if a == "_" && len(d.Axes) == 1 {
				continue
			}
			switch {
			case a == "pp":
				return nil, l.errorf(d.Pos, "shard of %s: pp is the pipeline axis; parameters go to stages by stage markers or --partition, not by sharding", param)
			case a == "dp":
				return nil, l.errorf(d.Pos, "shard of %s: parameters are not split over dp (data parallelism replicates them; --zero shards the optimizer state)", param)
			case a != "tp":
				return nil, l.errorf(d.Pos, "shard of %s: %q is not a mesh axis that splits parameters (want tp, or _ for a whole dim)", param, a)
			case used[a]:
				return nil, l.errorf(d.Pos, "shard of %s uses mesh axis %s twice", param, a)
			}
			used[a] = true
			s.Dims[i] = append(s.Dims[i], a)
		}
	}
	return s, nil
}

// evalInit evaluates a parameter initialiser to its model-convention string.
func (l *lowerer) evalInit(sc *scope, e *exprAST) (string, error) {
	const want = "an initialiser: normal(STD), uniform(A, B), zeros or ones"
	n := asName(e)
	if n == nil || len(n.Path) != 1 || n.Index != nil {
		return "", l.errorf(e.Pos, "want %s", want)
	}
	name := n.Path[0]
	if n.Call == nil {
		if name == "zeros" || name == "ones" {
			return name, nil
		}
		return "", l.errorf(e.Pos, "unknown initialiser %s; want %s", name, want)
	}
	if n.Call.As != nil {
		return "", l.errorf(n.Call.As.Pos, "an initialiser takes no `as`")
	}
	var args []float64
	for _, a := range n.Call.Args {
		if a.Rhs != nil {
			return "", l.errorf(a.Pos, "initialiser arguments are positional")
		}
		v, err := l.eval(sc, a.Lhs)
		if err != nil {
			return "", err
		}
		if !v.isNum() || math.IsNaN(v.num()) || math.IsInf(v.num(), 0) {
			return "", l.errorf(a.Pos, "initialiser argument must be a finite number, got %s", v.describe())
		}
		args = append(args, v.num())
	}
	switch name {
	case "normal":
		if len(args) != 1 {
			return "", l.errorf(e.Pos, "normal takes 1 argument (the standard deviation), got %d", len(args))
		}
		if args[0] < 0 {
			return "", l.errorf(n.Call.Args[0].Pos, "normal: standard deviation must not be negative, got %s", fmtFloat(args[0]))
		}
		return "normal(" + fmtFloat(args[0]) + ")", nil
	case "uniform":
		if len(args) != 2 {
			return "", l.errorf(e.Pos, "uniform takes 2 arguments (low, high), got %d", len(args))
		}
		if args[0] > args[1] {
			return "", l.errorf(e.Pos, "uniform: low %s is above high %s", fmtFloat(args[0]), fmtFloat(args[1]))
		}
		return "uniform(" + fmtFloat(args[0]) + ", " + fmtFloat(args[1]) + ")", nil
	case "zeros", "ones":
		if len(args) != 0 {
			return "", l.errorf(e.Pos, "%s takes no arguments", name)
		}
		return name, nil
	}
	return "", l.errorf(e.Pos, "unknown initialiser %s; want %s", name, want)
}

// asName returns e's name expression when e is nothing but one.
func asName(e *exprAST) *nameExpr {
	if len(e.Rest) > 0 || len(e.Left.Rest) > 0 {
		return nil
	}
	c := e.Left.Left
	if c.Rest != nil || len(c.Left.Rest) > 0 || len(c.Left.Left.Rest) > 0 {
		return nil
	}
	u := c.Left.Left.Left
	if u.Primary == nil {
		return nil
	}
	return u.Primary.Name
}

func (l *lowerer) execRepeat(sc *scope, r *repeatAST) (ret []val, returned bool, err error) {
	var count val
	switch c := r.Count; {
	case c.Int != nil:
		count, err = l.intLiteral(c.Pos, *c.Int)
	case c.Name != nil:
		count, err = l.lookup(sc, c.Pos, *c.Name)
	default:
		count, err = l.eval(sc, c.Paren)
	}
	if err != nil {
		return nil, false, err
	}
	if count.k != kInt || count.i < 1 {
		return nil, false, l.errorf(r.Count.Pos, "repeat count must be a positive integer, got %s", count.describe())
	}
	if count.i > maxRepeat {
		return nil, false, l.errorf(r.Count.Pos, "repeat count %d is too large (at most %d)", count.i, maxRepeat)
	}
	var idx string
	var saved val
	var had bool
	if r.Index != nil {
		idx = r.Index.Name
		if reserved(idx) {
			return nil, false, l.errorf(r.Index.Pos, "%s is reserved and cannot name a repeat index", idx)
		}
		saved, had = sc.vars[idx]
	}
	l.repeats++
	defer func() { l.repeats-- }()
	for i := range count.i {
		if err := l.tick(r.Pos); err != nil {
			return nil, false, err
		}
		if idx != "" {
			sc.vars[idx] = intVal(i)
		}
		if ret, returned, err = l.execBody(sc, r.Body); err != nil || returned {
			return ret, returned, err
		}
	}
	if idx != "" {
		if had {
			sc.vars[idx] = saved
		} else {
			delete(sc.vars, idx)
		}
	}
	return nil, false, nil
}

func (l *lowerer) execIf(sc *scope, s *ifAST) ([]val, bool, error) {
	for s != nil {
		if err := l.tick(s.Pos); err != nil {
			return nil, false, err
		}
		c, err := l.eval(sc, s.Cond)
		if err != nil {
			return nil, false, err
		}
		if c.k != kBool {
			return nil, false, l.errorf(s.Cond.Pos, "if needs a compile-time bool condition, got %s", c.describe())
		}
		if c.b {
			return l.execBody(sc, s.Then)
		}
		if s.Else != nil {
			return l.execBody(sc, s.Else)
		}
		s = s.ElseIf
	}
	return nil, false, nil
}

func (l *lowerer) execLoss(sc *scope, s *lossAST) error {
	if sc.block != nil {
		return l.errorf(s.Pos, "the loss is declared in forward, not in block %s", sc.block.Name.Name)
	}
	if l.loss != nil {
		return l.errorf(s.Pos, "loss declared twice (first at %s)", l.srcs.loc(l.lossAt))
	}
	if len(l.outputs) > 0 {
		return l.errorf(s.Pos, "a model declares either a loss or outputs, not both")
	}
	v, err := l.eval(sc, s.Value)
	if err != nil {
		return err
	}
	if v.k != kTensor || v.t.Type.Rank() != 0 || !v.t.Type.DType.IsFloat() {
		return l.errorf(s.Value.Pos, "the loss must be a floating-point scalar, got %s", v.describe())
	}
	if v.t.Def != nil && v.t.Name == "" {
		v.t.Name = "loss"
	}
	l.loss, l.lossAt = v.t, s.Pos
	return nil
}

// execMetric records a metric: a scalar of each micro-batch that the step reports summed over
// its micro-batches and replicas (`ppc run` prints it beside the loss, --log-json as a key).
// It may be declared in a block (a layer's count): every declaration of a name adds to it.
func (l *lowerer) execMetric(sc *scope, s *metricAST) error {
	name := s.Name.Name
	if !metricName.MatchString(name) || name == "loss" {
		return l.errorf(s.Name.Pos, "metric name %q: want lower-case letters, digits and _, starting with a letter, and not loss", name)
	}
	v, err := l.eval(sc, s.Value)
	if err != nil {
		return err
	}
	if v.k != kTensor || v.t.Type.Rank() != 0 || v.t.Type.DType == ir.Bool {
		return l.errorf(s.Value.Pos, "a metric must be a numeric scalar, got %s", v.describe())
	}
	t := v.t
	if t.Type.DType != ir.F32 {
		if t, err = l.op(s.Value.Pos, "cast", ir.Attrs{{Name: "to", Value: ir.Ident("f32")}}, t); err != nil {
			return err
		}
	}
	l.metrics = append(l.metrics, output{name, t})
	return nil
}

var metricName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

func (l *lowerer) execOutput(sc *scope, s *outputAST) error {
	if sc.block != nil {
		return l.errorf(s.Pos, "outputs are declared in forward, not in block %s", sc.block.Name.Name)
	}
	if l.loss != nil {
		return l.errorf(s.Pos, "a model declares either a loss or outputs, not both")
	}
	name := s.Name.Name
	if p, ok := l.outNames[name]; ok {
		return l.errorf(s.Name.Pos, "output %s declared twice (first at %s)", name, l.srcs.loc(p))
	}
	var v val
	var err error
	if s.Value != nil {
		v, err = l.eval(sc, s.Value)
	} else {
		v, err = l.lookup(sc, s.Name.Pos, name)
	}
	if err != nil {
		return err
	}
	if v.k != kTensor {
		return l.errorf(s.Pos, "output %s must be a tensor, got %s", name, v.describe())
	}
	if v.t.Def != nil && v.t.Name == "" {
		v.t.Name = name
	}
	l.outNames[name] = s.Name.Pos
	l.outputs = append(l.outputs, output{name, v.t})
	return nil
}

func (l *lowerer) execAssign(sc *scope, s *assignAST) error {
	if err := l.tick(s.Pos); err != nil {
		return err
	}
	v, err := l.eval(sc, s.Value)
	if err != nil {
		return err
	}
	vals := []val{v}
	switch {
	case v.k == kNone:
		return l.errorf(s.Value.Pos, "the right-hand side returns no value")
	case v.k == kTuple && len(s.Targets) != len(v.list):
		return l.errorf(s.Value.Pos, "cannot assign %d values to %d names", len(v.list), len(s.Targets))
	case v.k == kTuple:
		vals = v.list
	case len(s.Targets) != 1:
		return l.errorf(s.Value.Pos, "cannot assign one value (%s) to %d names", v.describe(), len(s.Targets))
	}
	for i, t := range s.Targets {
		switch {
		case reserved(t.Name):
			return l.errorf(t.Pos, "cannot assign to %s: the name is reserved", t.Name)
		case l.cfg[t.Name] != nil:
			return l.errorf(t.Pos, "cannot assign to %s: it is a config constant", t.Name)
		case l.inputs[t.Name] != nil:
			return l.errorf(t.Pos, "cannot assign to %s: it is an input", t.Name)
		}
		if w := vals[i]; w.k == kTensor && w.t.Def != nil && (w.t.Name == "" || l.weak[w.t]) {
			delete(l.weak, w.t)
			if sc.ns != "" {
				w.t.Name = sc.ns + "." + t.Name
			} else {
				w.t.Name = t.Name
			}
		}
		sc.vars[t.Name] = vals[i]
	}
	return nil
}

// evalType evaluates a declared tensor type.
func (l *lowerer) evalType(sc *scope, t *typeAST) (ir.Type, error) {
	dt, ok := ir.ParseDType(t.DType)
	if !ok {
		return ir.Type{}, l.errorf(t.Pos, "unknown dtype %s (%s)", t.DType, dtypeList())
	}
	return l.shape(sc, t.Pos, dt, t.Dims)
}

func dtypeList() string {
	names := make([]string, len(ir.DTypes))
	for i, d := range ir.DTypes {
		names[i] = d.String()
	}
	return "valid dtypes: " + strings.Join(names, ", ")
}

// shape evaluates dims to a type, requiring positive integers and a bounded element count.
func (l *lowerer) shape(sc *scope, p pos, dt ir.DType, dims []*exprAST) (ir.Type, error) {
	s := make(ir.Shape, len(dims))
	n := int64(1)
	for i, d := range dims {
		v, err := l.eval(sc, d)
		if err != nil {
			return ir.Type{}, err
		}
		if v.k != kInt || v.i < 1 {
			return ir.Type{}, l.errorf(d.Pos, "dimension must be a positive integer, got %s", v.describe())
		}
		if v.i > maxElements/n {
			return ir.Type{}, l.errorf(d.Pos, "tensor too large: more than 2^50 elements")
		}
		n *= v.i
		s[i] = int(v.i)
	}
	return ir.Type{DType: dt, Shape: s}, nil
}

func (l *lowerer) evalInt(sc *scope, e *exprAST, what string) (int64, error) {
	v, err := l.eval(sc, e)
	if err != nil {
		return 0, err
	}
	if v.k != kInt {
		return 0, l.errorf(e.Pos, "%s must be an integer, got %s", what, v.describe())
	}
	return v.i, nil
}

// pos returns the position of a statement.
func (st *stmtAST) pos() pos {
	switch {
	case st.Param != nil:
		return st.Param.Pos
	case st.Stage != nil:
		return st.Stage.Pos
	case st.Return != nil:
		return st.Return.Pos
	case st.Repeat != nil:
		return st.Repeat.Pos
	case st.If != nil:
		return st.If.Pos
	case st.Loss != nil:
		return st.Loss.Pos
	case st.Output != nil:
		return st.Output.Pos
	case st.Metric != nil:
		return st.Metric.Pos
	case st.Assign != nil:
		return st.Assign.Pos
	}
	return pos{}
}

// replicaNote explains a micro-batch count that spans data-parallel replicas.
func replicaNote(m, replicas int) string {
	if replicas <= 1 {
		return ""
	}
	return fmt.Sprintf(" (%d per data-parallel replica × %d replicas)", m/replicas, replicas)
}

// divisorList lists the divisors of n in order (the first 64), in O(√n).
func divisorList(n int64) string {
	var lo, hi []int64
	for d := int64(1); d*d <= n; d++ {
		if n%d == 0 {
			lo = append(lo, d)
			if d*d != n {
				hi = append(hi, n/d)
			}
		}
	}
	slices.Reverse(hi)
	var ds []string
	for _, d := range append(lo, hi...) {
		if len(ds) < 64 {
			ds = append(ds, strconv.FormatInt(d, 10))
		}
	}
	return strings.Join(ds, ", ")
}

// nearestBatch names the multiples of m around b.
func nearestBatch(b, m int64) string {
	lo := b / m * m
	if lo == 0 {
		return fmt.Sprint(m)
	}
	return fmt.Sprintf("%d or %d", lo, lo+m)
}
