package ir

import (
	"fmt"
	"slices"
	"strings"
)

// Sharding over the device mesh (docs/DESIGN.md §6).
//
// A module's `mesh` attribute gives its axes' sizes (`mesh = {dp = 2, pp = 2, tp = 2}`); ranks
// are numbered in MeshOrder, tp fastest, as in Megatron-core.
// A sharding describes a logical (global) tensor: dim i is split into equal blocks over the
// axes Dims[i] (the first axis outermost), and Partial lists axes over which every rank holds
// a partial sum of the value. Shardings sit on op results (the `shard` annotation) and on
// parameter and input arguments (the `shard` argument attribute, written by users in the DSL
// or by the annotation pass); the shapes they annotate are always the logical ones, so a
// sharded module still prints, parses and verifies like an unsharded one, and a dim must be
// divisible by the product of the sizes of the axes that split it.

// AttrPartitioned (unit, on a module) says its shapes are per-rank (local) shapes: the SPMD
// partitioner has divided every sharded dim, and shardings now say how a local value relates
// to the logical one (a local dim times the product of its axes' sizes is the logical dim).
const AttrPartitioned = "partitioned"

// AttrShard (sharding, on a parameter or input argument) lays the argument out over the mesh;
// it is written like the `shard` annotation of an op: `shard = [_, tp]`.
const AttrShard = "shard"

// MeshAxis is one axis of the device mesh.
type MeshAxis struct {
	Name string
	Size int
}

// MeshOrder is the rank order of the mesh axes, slowest first: ranks are numbered with tp
// varying fastest, then cp, ep, dp, and pp slowest, as Megatron-core numbers them, so a tp
// group is a run of consecutive ranks (one node's NVLink domain). Axes not listed here sort
// before them, by name.
var MeshOrder = []string{"pp", "dp", "ep", "cp", "tp"}

// Mesh returns the module's mesh axes in rank order (MeshOrder), or nil when it declares
// none. The attribute itself is a dictionary, printed sorted by name like every dictionary,
// so the order is the convention's, not the text's. Malformed entries (reported by Verify)
// are skipped.
func (m *Module) Mesh() []MeshAxis {
	d, _ := m.Attrs.Get("mesh").(Dict)
	var out []MeshAxis
	for _, a := range d {
		if n, ok := a.Value.(Int); ok && n >= 1 {
			out = append(out, MeshAxis{a.Name, int(n)})
		}
	}
	rank := func(name string) int { return slices.Index(MeshOrder, name) }
	slices.SortStableFunc(out, func(a, b MeshAxis) int {
		if ra, rb := rank(a.Name), rank(b.Name); ra != rb {
			return ra - rb
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// SetMesh sets the module's mesh attribute to the given axes.
func (m *Module) SetMesh(axes []MeshAxis) {
	var d Dict
	for _, a := range axes {
		d = append(d, NamedAttr{a.Name, Int(a.Size)})
	}
	m.Attrs = m.Attrs.Set("mesh", d)
}

// meshSizes maps axis names to sizes: the module's mesh, or the default axis names with
// unknown (0) sizes when it declares none.
func meshSizes(m *Module) map[string]int {
	sizes := map[string]int{}
	if m.Attrs.Get("mesh") == nil {
		for _, a := range DefaultMeshAxes {
			sizes[a] = 0
		}
		return sizes
	}
	for _, a := range m.Mesh() {
		sizes[a.Name] = a.Size
	}
	if ep, ok := sizes["ep"]; ok && ep > 0 {
		// Expert parallelism carves ep from dp: edp, the ranks that hold the same experts, is
		// a sub-axis of dp too (passes.EDPAxis).
		sizes["edp"] = sizes["dp"] / ep
	}
	return sizes
}

// Replicated reports whether the sharding splits nothing and has no pending partial sum.
func (s *Sharding) Replicated() bool {
	if s == nil {
		return true
	}
	for _, d := range s.Dims {
		if len(d) > 0 {
			return false
		}
	}
	return len(s.Partial) == 0
}

// Equal reports whether two shardings lay a value out identically (nil is replicated).
func (s *Sharding) Equal(o *Sharding) bool {
	if s.Replicated() || o.Replicated() {
		return s.Replicated() && o.Replicated()
	}
	if len(s.Dims) != len(o.Dims) || !slices.Equal(s.Partial, o.Partial) {
		return false
	}
	for i := range s.Dims {
		if !slices.Equal(s.Dims[i], o.Dims[i]) {
			return false
		}
	}
	return true
}

func (s *Sharding) String() string { return AttrString(s.Attr()) }

// Factor is the number of blocks dim i is split into under the given axis sizes.
func (s *Sharding) Factor(i int, sizes map[string]int) int {
	n := 1
	if s != nil && i < len(s.Dims) {
		for _, a := range s.Dims[i] {
			n *= max(sizes[a], 1)
		}
	}
	return n
}

// LocalShape is the shape of one rank's block of a value of the given logical shape.
func (s *Sharding) LocalShape(shape Shape, sizes map[string]int) Shape {
	out := slices.Clone(shape)
	for i := range out {
		out[i] /= s.Factor(i, sizes)
	}
	return out
}

// Check validates s for a value of type t on a mesh whose axes have the given sizes (a size
// of 0 means unknown: divisibility is not checked). It reports an axis that is not on the
// mesh, an axis used twice, a rank mismatch, and a dim that the axes do not divide evenly,
// with the nearest sizes that would.
func (s *Sharding) Check(t Type, sizes map[string]int) error {
	used := map[string]bool{}
	for _, axes := range append(slices.Clone(s.Dims), s.Partial) {
		for _, a := range axes {
			if _, ok := sizes[a]; !ok {
				return fmt.Errorf("shard uses %q, which is not a mesh axis (the mesh has %s)", a, axisList(sizes))
			}
			if used[a] {
				return fmt.Errorf("shard uses mesh axis %s twice", a)
			}
			used[a] = true
		}
	}
	if !t.Known() {
		return nil
	}
	if len(s.Dims) != t.Rank() {
		return fmt.Errorf("shard lists %d dims but the value has rank %d", len(s.Dims), t.Rank())
	}
	for i, d := range t.Shape {
		f := s.Factor(i, sizes)
		if f > 1 && d%f != 0 {
			return fmt.Errorf("dim %d of %s (size %d) is not divisible by %s = %d; nearest sizes that divide: %s",
				i, t, d, strings.Join(s.Dims[i], "×"), f, nearestMultiples(d, f))
		}
	}
	return nil
}

// nearestMultiples names the multiples of f around d ("48 or 52", or "4" below f).
func nearestMultiples(d, f int) string {
	lo := d / f * f
	if lo == 0 {
		return fmt.Sprint(f)
	}
	return fmt.Sprintf("%d or %d", lo, lo+f)
}

func axisList(sizes map[string]int) string {
	names := make([]string, 0, len(sizes))
	for a := range sizes {
		names = append(names, a)
	}
	slices.Sort(names)
	if len(names) == 0 {
		return "no axes"
	}
	return strings.Join(names, ", ")
}

// ArgSharding returns the sharding argument i of f carries (nil when none) or an error when
// its shard attribute is malformed.
func ArgSharding(f *Func, i int) (*Sharding, error) {
	if i >= len(f.ArgAttrs) {
		return nil, nil
	}
	a := f.ArgAttrs[i].Get(AttrShard)
	if a == nil {
		return nil, nil
	}
	return ShardingFromAttr(a)
}

// Uses reports whether the sharding splits a dim over axis or is partial over it.
func (s *Sharding) Uses(axis string) bool {
	if s == nil {
		return false
	}
	for _, d := range s.Dims {
		if slices.Contains(d, axis) {
			return true
		}
	}
	return slices.Contains(s.Partial, axis)
}

// unknownSizes is sizes with every size unknown: shardings are checked for their axes only.
func unknownSizes(sizes map[string]int) map[string]int {
	out := make(map[string]int, len(sizes))
	for a := range sizes {
		out[a] = 0
	}
	return out
}
