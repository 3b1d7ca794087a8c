package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// A checkpoint directory (what --save writes, in-process or from many processes alike):
//
//	DIR/checkpoint.json                      the index: step, seed, source hash, and for every
//	                                         tensor its dtype, full shape and blocks
//	DIR/step-00000020/rank-00003.safetensors the blocks rank 3 owns, each under its tensor's name
//
// Every distinct block of a parameter or optimizer state — a tensor-parallel or ZeRO shard,
// or a whole tensor — is owned by the lowest rank that holds it, so data-parallel replicas and
// tied weights are written once, and each rank writes only what it holds: no process
// gathers the model. Ownership depends on the plan alone, so rank 0 writes the index without
// asking anyone. The index is written last, atomically: it is the commit point. A save that
// fails or is killed before it leaves the previous index and its step directory as they were;
// a committed save removes every other step directory. The same state gives the same bytes
// whichever process wrote which file (TestShardFilesMatchInProcess).

// IndexFile is the index of a checkpoint directory.
const IndexFile = "checkpoint.json"

// SingleFile is the one file older checkpoint directories held (read still).
const SingleFile = "checkpoint.safetensors"

const (
	indexFormat  = "ppc-checkpoint"
	indexVersion = 1
)

// ShardFile is one rank's file of a checkpoint, as WriteShards reports it.
type ShardFile struct {
	Rank   int    `json:"rank"`
	File   string `json:"file"` // relative to the checkpoint directory
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
	// Blocks: the SHA-256 of each tensor's bytes in the file, by name.
	Blocks map[string]string `json:"blocks"`
}

type ckIndex struct {
	Format     string                  `json:"format"`
	Version    int                     `json:"version"`
	Step       int                     `json:"step"`
	Seed       uint64                  `json:"seed"`
	SourceHash string                  `json:"source_hash"`
	Model      string                  `json:"model"`
	Optimizer  string                  `json:"optimizer,omitempty"` // the plan's, schedule and clipping included
	Dir        string                  `json:"dir"`
	Files      map[string]ckFile       `json:"files"`
	Tensors    map[string]ckTensorInfo `json:"tensors"`
}

type ckFile struct {
	Rank   int    `json:"rank"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

type ckTensorInfo struct {
	DType  string    `json:"dtype"`
	Shape  []int     `json:"shape"`
	Blocks []ckBlock `json:"blocks"`
}

// ckBlock is one block of a tensor: the file that holds it, where it lies in the tensor,
// its shape and the SHA-256 of its bytes, so that a reader can read and check the blocks it
// needs alone. Indexes from before shapes and hashes lack both (Shape nil, not []: a
// scalar's shape is written as []).
type ckBlock struct {
	File   string  `json:"file"`
	Offset []int64 `json:"offset"`
	Shape  []int   `json:"shape"`
	SHA256 string  `json:"sha256,omitempty"`
}

// Meta is what a checkpoint says of itself.
type Meta struct {
	Step       int
	Seed       uint64
	SourceHash string
	Model      string
	Optimizer  string // the --optimizer value (schedule and clipping included) it was trained with
}

// Block is one block of a tensor as its owner writes it: the lowest rank that holds it, the
// whole tensor's type, and where the block lies in it.
type Block struct {
	Rank   int
	Name   string
	Full   ir.Type
	Offset []int64  // along each dim of Full; [] for a scalar
	Shape  ir.Shape // the block's own
}

func shardFileName(rank int) string { return fmt.Sprintf("rank-%05d.safetensors", rank) }

// SaveDir is the step directory a save of step writes into: step-00000020, or
// step-00000020-b when the committed checkpoint already uses that name (a second save of the
// same step must not overwrite the files the index vouches for). Every process of a run
// computes the same name: the index does not change until all have written.
func SaveDir(dir string, step int) string {
	name := stepDirName(step)
	if Committed(dir) == name {
		name += "-b"
	}
	return name
}

// stepDirName is the name of step's directory: step-00000020.
func stepDirName(step int) string { return fmt.Sprintf("step-%08d", step) }

// Committed is the step directory of the checkpoint committed in dir ("" if none).
func Committed(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, IndexFile))
	if err != nil {
		return ""
	}
	var idx struct {
		Dir string `json:"dir"`
	}
	json.Unmarshal(b, &idx)
	return idx.Dir
}

// WriteShards writes the blocks each rank owns for step (byRank: rank → tensor name → the
// block's bytes on the host) into dir's step directory, a file per rank, each atomically, and
// reports them (for Commit, which rank 0 runs once every rank has written).
func WriteShards(dir string, step int, byRank map[int]map[string]device.Tensor) ([]ShardFile, error) {
	if len(byRank) == 0 {
		return nil, nil
	}
	sub := SaveDir(dir, step)
	if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
		return nil, err
	}
	ranks := make([]int, 0, len(byRank))
	for r := range byRank {
		ranks = append(ranks, r)
	}
	sort.Ints(ranks)
	var out []ShardFile
	for _, r := range ranks {
		rel := sub + "/" + shardFileName(r)
		path := filepath.Join(dir, rel)
		meta := map[string]string{"format": "ppc-checkpoint-shard", "step": strconv.Itoa(step), "rank": strconv.Itoa(r)}
		if err := WriteSafetensors(path, byRank[r], meta); err != nil {
			return nil, err
		}
		size, sum, err := hashFile(path)
		if err != nil {
			return nil, err
		}
		blocks := map[string]string{}
		for name, t := range byRank[r] {
			h := sha256.Sum256(t.Data)
			blocks[name] = hex.EncodeToString(h[:])
		}
		out = append(out, ShardFile{Rank: r, File: rel, Bytes: size, SHA256: sum, Blocks: blocks})
	}
	return out, nil
}

func hashFile(path string) (int64, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// Commit is rank 0's part of a save of meta.Step once every rank has written its shards
// (files): it checks that every owner's file is there (in a multi-process run, that --save
// is a directory every machine sees), writes the index of blocks (each distinct block of
// every tensor, by its owner) atomically — the commit — and removes the previous
// checkpoint's step directory.
func Commit(dir string, meta Meta, blocks []Block, files []ShardFile) error {
	step := meta.Step
	byRank := map[int]ShardFile{}
	for _, f := range files {
		byRank[f.Rank] = f
	}
	sub := SaveDir(dir, step)
	idx := ckIndex{Format: indexFormat, Version: indexVersion, Step: step, Seed: meta.Seed, SourceHash: meta.SourceHash,
		Model: meta.Model, Optimizer: meta.Optimizer, Dir: sub, Files: map[string]ckFile{}, Tensors: map[string]ckTensorInfo{}}
	for _, o := range blocks {
		f, ok := byRank[o.Rank]
		if !ok || f.File != sub+"/"+shardFileName(o.Rank) {
			return fmt.Errorf("rank %d wrote no file for step %d", o.Rank, step)
		}
		name := shardFileName(o.Rank)
		if _, done := idx.Files[name]; !done {
			st, err := os.Stat(filepath.Join(dir, f.File))
			if err != nil || st.Size() != f.Bytes {
				return fmt.Errorf("rank %d wrote %s, which is not here (%v): --save must be a directory every rank's machine sees (a shared file system)",
					o.Rank, filepath.Join(dir, f.File), describeStat(st, err, f.Bytes))
			}
			idx.Files[name] = ckFile{Rank: o.Rank, Bytes: f.Bytes, SHA256: f.SHA256}
		}
		info := idx.Tensors[o.Name]
		info.DType, info.Shape = stDTypes[o.Full.DType], o.Full.Shape
		shape := append([]int{}, o.Shape...) // [] for a scalar, not null
		info.Blocks = append(info.Blocks, ckBlock{File: name, Offset: o.Offset, Shape: shape, SHA256: f.Blocks[o.Name]})
		idx.Tensors[o.Name] = info
	}
	b, err := json.MarshalIndent(idx, "", " ")
	if err != nil {
		return err
	}
	if err := WriteFileAtomic(filepath.Join(dir, IndexFile), func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	}); err != nil {
		return err
	}
	// Committed: what the previous checkpoint used is garbage now.
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "step-") && e.Name() != idx.Dir {
			os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
	os.Remove(filepath.Join(dir, SingleFile))
	return nil
}

func describeStat(st os.FileInfo, err error, want int64) string {
	if err != nil {
		return trimPath(err)
	}
	return fmt.Sprintf("%d bytes, it wrote %d", st.Size(), want)
}

func trimPath(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// plainName is a file or directory name without a path in it.
func plainName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, `/\`)
}

type box struct {
	lo   []int64
	size ir.Shape
}

func (a box) overlaps(b box) bool {
	for d := range a.lo {
		if a.lo[d]+int64(a.size[d]) <= b.lo[d] || b.lo[d]+int64(b.size[d]) <= a.lo[d] {
			return false
		}
	}
	return true
}
