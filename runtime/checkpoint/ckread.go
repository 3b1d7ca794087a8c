package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
	"ppc.dev/ppc/runtime/fault"
)

// Reading a checkpoint. openCheckpoint parses and checks the index (or an older single
// safetensors file) without reading tensor data: every tensor's type and blocks, the blocks
// tiling it exactly, the step against its directory. Data is then read by byte range
// (safetensors offsets), a block at a time: a process resuming its ranks reads only the
// blocks that overlap theirs, so the cost of a resume per rank does not grow with the world
// size. Each block read is checked against the SHA-256 the index records for it (an index
// from before block hashes: the whole file's, once), and each file's header against the
// index (the block's type, the step).

// ckSource is one file of a checkpoint.
type ckSource struct {
	key   string // its name in the index ("" for a single-file checkpoint)
	path  string
	bytes int64  // the index's size (-1: not known)
	sha   string // the index's SHA-256 of the whole file ("" for a single-file checkpoint)
	hdr   *stHeader
	// verified: the whole file's SHA-256 was checked.
	verified bool
}

// ckBlockRef is one stored block of a tensor.
type ckBlockRef struct {
	name   string
	src    *ckSource
	offset []int64
	shape  ir.Shape // the index's (nil in an index from before block shapes: the header's)
	sha    string   // the index's SHA-256 of the block's bytes ("" if it has none)
}

type ckTensor struct {
	typ    ir.Type
	blocks []*ckBlockRef
}

// Reader reads the tensors of one checkpoint by byte range.
type Reader struct {
	Meta    Meta
	path    string // what errors name: the index, or the single file
	tensors map[string]*ckTensor
	sources map[string]*ckSource // an index's files, by name
	// wholeFiles: check every file's SHA-256 as well as the blocks' (Read, which
	// reads every file anyway).
	wholeFiles bool
	// cache, when set, keeps the blocks read, for ranks of this process that share one (the
	// data-parallel replicas of an in-process run).
	cache map[*ckBlockRef][]byte
	bytes int64 // tensor data read
}

func (c *Reader) fail(format string, args ...any) error {
	return fault.Inputf("%s: "+format, append([]any{c.path}, args...)...)
}

// Open opens a checkpoint for reading by byte range (ReadInto): its index is read and
// checked whole, no tensor data. Blocks read are kept, for the ranks of this process that
// share one (the data-parallel replicas of an in-process run).
func Open(path string) (*Reader, error) {
	c, err := openCheckpoint(path)
	if err != nil {
		return nil, err
	}
	c.cache = map[*ckBlockRef][]byte{}
	return c, nil
}

// Tensors lists the checkpoint's tensors by name, each with its whole type.
func (c *Reader) Tensors() map[string]ir.Type {
	out := make(map[string]ir.Type, len(c.tensors))
	for name, t := range c.tensors {
		out[name] = t.typ
	}
	return out
}

// Bytes is the tensor data read so far.
func (c *Reader) Bytes() int64 { return c.bytes }

// openCheckpoint opens a checkpoint: its directory (the index, or an older single-file
// checkpoint.safetensors), the index file, or a safetensors file (an older checkpoint, ppc
// import's output).
func openCheckpoint(path string) (*Reader, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, &fault.InputError{Err: err}
	}
	if st.IsDir() {
		idx := filepath.Join(path, IndexFile)
		if _, err := os.Stat(idx); err == nil {
			return openIndexed(idx)
		}
		file := filepath.Join(path, SingleFile)
		if _, err := os.Stat(file); err != nil {
			return nil, fault.Inputf("%s: not a checkpoint directory (no %s; ppc run --save DIR writes one)", path, IndexFile)
		}
		path = file
	} else if strings.HasSuffix(path, ".json") {
		return openIndexed(path)
	}
	return openSingleFile(path)
}

// openSingleFile opens a checkpoint that is one safetensors file: each tensor one block.
func openSingleFile(path string) (*Reader, error) {
	c := &Reader{path: path, tensors: map[string]*ckTensor{}}
	src := &ckSource{path: path, bytes: -1}
	if err := c.header(src); err != nil {
		return nil, err
	}
	meta := src.hdr.meta
	m := Meta{SourceHash: meta["source_hash"], Model: meta["model"]}
	var err error
	m.Step, err = strconv.Atoi(meta["step"])
	if err != nil || m.Step < 0 {
		return nil, fault.Inputf("%s: metadata has no valid step count", path)
	}
	// The seed picks the synthetic data of the remaining steps, so a caller needs it to
	// continue the run that saved the checkpoint.
	if m.Seed, err = strconv.ParseUint(meta["seed"], 10, 64); err != nil {
		return nil, fault.Inputf("%s: metadata has no valid seed", path)
	}
	c.Meta = m
	for name, e := range src.hdr.tensors {
		c.tensors[name] = &ckTensor{typ: e.typ, blocks: []*ckBlockRef{{name: name, src: src, offset: make([]int64, e.typ.Rank()), shape: e.typ.Shape}}}
	}
	return c, nil
}

func openIndexed(path string) (*Reader, error) {
	c := &Reader{path: path, tensors: map[string]*ckTensor{}}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &fault.InputError{Err: err}
	}
	var idx ckIndex
	if err := json.Unmarshal(data, &idx); err != nil {
		return nil, c.fail("not a checkpoint index: %v", err)
	}
	if idx.Format != indexFormat || idx.Version != indexVersion {
		return nil, c.fail("not a ppc checkpoint index (format %q version %d; this ppc reads %q version %d)", idx.Format, idx.Version, indexFormat, indexVersion)
	}
	if idx.Step < 0 || !plainName(idx.Dir) {
		return nil, c.fail("bad step %d or directory %q", idx.Step, idx.Dir)
	}
	// A save of step N writes step-0000000N (or step-0000000N-b): a step that is not its
	// directory's was edited, and would resume the schedule at the wrong place.
	if d := stepDirName(idx.Step); idx.Dir != d && idx.Dir != d+"-b" {
		return nil, c.fail("step %d does not match the checkpoint's directory %s: the index was edited or corrupted", idx.Step, idx.Dir)
	}
	c.Meta = Meta{Step: idx.Step, Seed: idx.Seed, SourceHash: idx.SourceHash, Model: idx.Model, Optimizer: idx.Optimizer}
	root := filepath.Dir(path)
	sources := map[string]*ckSource{}
	c.sources = sources
	for name, f := range idx.Files {
		if !plainName(name) {
			return nil, c.fail("bad file name %q", name)
		}
		sources[name] = &ckSource{key: name, path: filepath.Join(root, idx.Dir, name), bytes: f.Bytes, sha: f.SHA256}
	}
	for name, info := range idx.Tensors {
		dt := stDType(info.DType)
		if dt == ir.Invalid {
			return nil, c.fail("tensor %s: unsupported dtype %q", name, info.DType)
		}
		full := ir.Type{DType: dt, Shape: ir.Shape(info.Shape)}
		if full.Shape == nil {
			full.Shape = ir.Shape{}
		}
		total, ok := elements(info.Shape)
		if !ok {
			return nil, c.fail("tensor %s: bad shape %v", name, info.Shape)
		}
		t := &ckTensor{typ: full}
		// Every block is checked, and the blocks must cover the tensor exactly: an index
		// cannot make a reader allocate more than the tensor (whose type the caller checks
		// against its plan, or Read against the files).
		var covered int64
		var boxes []box
		for _, b := range info.Blocks {
			src := sources[b.File]
			if src == nil {
				return nil, c.fail("tensor %s: block in %s, which the index does not list", name, b.File)
			}
			ref := &ckBlockRef{name: name, src: src, offset: b.Offset, sha: b.SHA256}
			if b.Shape != nil {
				ref.shape = ir.Shape(b.Shape)
			} else {
				// An index from before block shapes: the file's header says.
				if err := c.header(src); err != nil {
					return nil, err
				}
				e, ok := src.hdr.tensors[name]
				if !ok {
					return nil, c.fail("tensor %s: block in %s, which does not hold it", name, b.File)
				}
				ref.shape = e.typ.Shape
			}
			n, ok := elements(ref.shape)
			if !ok || len(ref.shape) != full.Rank() || len(b.Offset) != full.Rank() {
				return nil, c.fail("tensor %s: block %v at %v does not fit %s", name, []int(ref.shape), b.Offset, full)
			}
			for d := range b.Offset {
				if b.Offset[d] < 0 || b.Offset[d]+int64(ref.shape[d]) > int64(full.Shape[d]) {
					return nil, c.fail("tensor %s: block %v at %v does not fit %s", name, []int(ref.shape), b.Offset, full)
				}
			}
			bx := box{lo: b.Offset, size: ref.shape}
			for _, o := range boxes {
				if o.overlaps(bx) {
					return nil, c.fail("tensor %s: blocks at %v and %v overlap", name, o.lo, bx.lo)
				}
			}
			boxes = append(boxes, bx)
			covered += n
			t.blocks = append(t.blocks, ref)
		}
		if covered != total {
			return nil, c.fail("tensor %s: its blocks cover %d of its %d elements", name, covered, total)
		}
		c.tensors[name] = t
	}
	return c, nil
}

// elements is the number of elements of a shape, false for a negative dim or more than
// 2^50 elements.
func elements(shape []int) (int64, bool) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 || (d > 0 && n > (1<<50)/int64(d)) {
			return 0, false
		}
		n *= int64(d)
	}
	return n, true
}

// header reads and checks src's safetensors header, once: its size against the index, and
// the step its writer recorded against the index's.
func (c *Reader) header(src *ckSource) error {
	if src.hdr != nil {
		return nil
	}
	name := src.path
	f, err := os.Open(src.path)
	if err != nil {
		return c.fail("%s: %v", filepath.Base(src.path), trimPath(err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return c.fail("%s: %v", filepath.Base(src.path), trimPath(err))
	}
	if src.bytes >= 0 && st.Size() != src.bytes {
		return c.fail("%s is not the file the checkpoint wrote (%d bytes; the index says %d): truncated or replaced", name, st.Size(), src.bytes)
	}
	h, err := readHeader(f, st.Size())
	if err != nil {
		if src.key == "" {
			return &fault.InputError{Err: fmt.Errorf("%s: %v", name, err)}
		}
		return c.fail("%s: %v", name, err)
	}
	if src.key != "" {
		if s := h.meta["step"]; s != strconv.Itoa(c.Meta.Step) {
			return c.fail("%s holds step %q, the index says step %d: the index was edited or corrupted", name, s, c.Meta.Step)
		}
	}
	src.hdr = h
	return nil
}

// entry is the header entry of a stored block, checked against the index: the file holds
// the tensor, with the block's dtype and shape.
func (c *Reader) entry(b *ckBlockRef) (stTensor, error) {
	src := b.src
	if err := c.header(src); err != nil {
		return stTensor{}, err
	}
	e, ok := src.hdr.tensors[b.name]
	if !ok {
		return stTensor{}, c.fail("tensor %s: block in %s, which does not hold it", b.name, src.path)
	}
	if want := c.tensors[b.name].typ.DType; e.typ.DType != want || !e.typ.Shape.Equal(b.shape) {
		return stTensor{}, c.fail("tensor %s: %s holds its block at %v as %s, the index says %s", b.name, src.path, b.offset, e.typ, ir.Type{DType: want, Shape: b.shape})
	}
	return e, nil
}

// verifyFile checks src's SHA-256 against the index, once (a single file has none).
func (c *Reader) verifyFile(src *ckSource) error {
	if src.sha == "" || src.verified {
		return nil
	}
	size, sum, err := hashFile(src.path)
	if err != nil {
		return c.fail("%s: %v", filepath.Base(src.path), trimPath(err))
	}
	if size != src.bytes || sum != src.sha {
		return c.fail("%s is not the file the checkpoint wrote (%d bytes, SHA-256 %.12s…; the index says %d bytes, %.12s…): corrupted or replaced", src.path, size, sum, src.bytes, src.sha)
	}
	src.verified = true
	return nil
}

// block reads one stored block's bytes and checks them.
func (c *Reader) block(b *ckBlockRef) ([]byte, error) {
	if data, ok := c.cache[b]; ok {
		return data, nil
	}
	src := b.src
	e, err := c.entry(b)
	if err != nil {
		return nil, err
	}
	if c.wholeFiles || b.sha == "" {
		if err := c.verifyFile(src); err != nil {
			return nil, err
		}
	}
	f, err := os.Open(src.path)
	if err != nil {
		return nil, c.fail("%s: %v", filepath.Base(src.path), trimPath(err))
	}
	defer f.Close()
	data := device.HostBytes(e.hi - e.lo)
	if _, err := f.ReadAt(data, src.hdr.dataAt+e.lo); err != nil {
		return nil, c.fail("%s: tensor %s: %v", src.path, b.name, trimPath(err))
	}
	c.bytes += int64(len(data))
	if b.sha != "" {
		sum := sha256.Sum256(data)
		if got := hex.EncodeToString(sum[:]); got != b.sha {
			return nil, c.fail("%s: tensor %s's block at %v is not what the checkpoint wrote (SHA-256 %.12s…; the index says %.12s…): corrupted or replaced", src.path, b.name, b.offset, got, b.sha)
		}
	}
	if c.cache != nil {
		c.cache[b] = data
	}
	return data, nil
}

// ReadInto fills dst with its part of tensor name: the block of the whole tensor at offset
// (nil: dst is the whole tensor), reading only the stored blocks it overlaps. dst's dtype is
// the tensor's, and its block lies inside it (the caller checked both).
func (c *Reader) ReadInto(name string, offset []int64, dst device.Tensor) error {
	t := c.tensors[name]
	off := offset
	if off == nil {
		off = make([]int64, dst.Type.Rank())
	}
	for _, b := range t.blocks {
		if !overlap(b.offset, b.shape, off, dst.Type.Shape) {
			continue
		}
		data, err := c.block(b)
		if err != nil {
			return err
		}
		copyBox(dst.Data, off, dst.Type.Shape, data, b.offset, b.shape, int64(t.typ.DType.Size()))
	}
	return nil
}

// overlap reports whether the boxes at a (of shape as) and b (bs) share an element.
func overlap(a []int64, as ir.Shape, b []int64, bs ir.Shape) bool {
	for d := range a {
		if a[d] >= b[d]+int64(bs[d]) || b[d] >= a[d]+int64(as[d]) {
			return false
		}
	}
	return as.NumElements() > 0 && bs.NumElements() > 0
}

// copyBox copies the elements that the box dst (at dstOff, of dstShape, in the full tensor)
// and src share from src's bytes into dst's, a row of the last dim at a time.
func copyBox(dst []byte, dstOff []int64, dstShape ir.Shape, src []byte, srcOff []int64, srcShape ir.Shape, es int64) {
	rank := len(dstShape)
	if rank == 0 {
		copy(dst[:es], src[:es])
		return
	}
	lo, hi := make([]int64, rank), make([]int64, rank)
	for d := range rank {
		lo[d] = max(dstOff[d], srcOff[d])
		hi[d] = min(dstOff[d]+int64(dstShape[d]), srcOff[d]+int64(srcShape[d]))
		if lo[d] >= hi[d] {
			return
		}
	}
	row := (hi[rank-1] - lo[rank-1]) * es
	at := append([]int64{}, lo...)
	for {
		var di, si int64
		for d := range rank {
			di = di*int64(dstShape[d]) + at[d] - dstOff[d]
			si = si*int64(srcShape[d]) + at[d] - srcOff[d]
		}
		copy(dst[di*es:di*es+row], src[si*es:si*es+row])
		d := rank - 2
		for ; d >= 0; d-- {
			if at[d]++; at[d] < hi[d] {
				break
			}
			at[d] = lo[d]
		}
		if d < 0 {
			return
		}
	}
}

// Read reads a checkpoint as full tensors by name. path is a checkpoint directory
// (its index, or an older single-file checkpoint.safetensors), the index file, or a
// safetensors file (an older checkpoint, ppc import's output). Every shard's size and
// SHA-256 (and each block's) are checked against the index, and the blocks must tile each
// tensor exactly: a truncated, corrupted or hand-edited checkpoint is a *fault.InputError
// naming the file.
func Read(path string) (map[string]device.Tensor, Meta, error) {
	c, err := openCheckpoint(path)
	if err != nil {
		return nil, Meta{}, err
	}
	c.wholeFiles = true
	// Every file the index lists, including one that holds no block.
	for _, src := range c.sources {
		if err := c.verifyFile(src); err != nil {
			return nil, Meta{}, err
		}
	}
	out := map[string]device.Tensor{}
	for _, name := range slices.Sorted(maps.Keys(c.tensors)) { // the same error every time
		t := c.tensors[name]
		// The blocks' types against their files' headers before the tensor is allocated:
		// the files hold what the index says.
		for _, b := range t.blocks {
			if _, err := c.entry(b); err != nil {
				return nil, Meta{}, err
			}
		}
		full := device.Tensor{Type: t.typ, Data: device.HostBytes(t.typ.Bytes())}
		if err := c.ReadInto(name, nil, full); err != nil {
			return nil, Meta{}, err
		}
		out[name] = full
	}
	return out, c.Meta, nil
}
