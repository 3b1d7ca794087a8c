package compiler

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/passes"
	"ppc.dev/ppc/runtime"
	"ppc.dev/ppc/runtime/checkpoint"
	"ppc.dev/ppc/runtime/cpu"
	"ppc.dev/ppc/runtime/data"
	"ppc.dev/ppc/runtime/fault"
)

// TestTinyGPTLearns trains gpt.ppm --preset tiny for 200 steps on the synthetic repeating
// motifs, in fp32 and in mixed precision, and requires the loss to fall by at least half in
// each, and bf16's and fp16's (with dynamic loss scaling) to end no more than 10% above fp32's,
// where the end is the mean loss of the last 20 steps: one step's loss moves by its batch
// (fp32's step 200 at 2.00 against its last 20 steps' 2.39, measured 2026-11-27 after the
// CPU kernels' vectorised exp and GELU moved rounding by an ulp; bf16's step 200 at 2.25 then
// failed a comparison of single steps, while its last 20 steps' mean was 2.29).
// The bound is one-sided: at lr 1e-2 the loss at step 200 depends chaotically on rounding —
// fp32 alone ends anywhere from 1.93 to 2.35 when AdamW's eps moves from 5e-9 to 2e-8 — and
// bf16's coarser rounding lands it lower here (1.45 against fp32's 2.05; fp16 1.97). At lr
// 2e-3 the three stay within 0.5% of each other all the way; TestMixedPrecisionGradient
// checks one step's gradients two-sided. Only fp16 may skip steps for overflow. (With the
// attention chain materialised, fp16's scaled score gradients overflowed at the initial
// scale 2^16 for the first steps; the fused attention keeps scores, probabilities and their
// gradients in f32 inside the kernel, and no step overflows. TestFP16OverflowSkipsEveryRank
// checks the skips.) The three runs take 12, 18
// and 25 s run in parallel on two cores: about 30 s in all.
func TestTinyGPTLearns(t *testing.T) {
	if testing.Short() {
		t.Skip("3 × 200 training steps; run without -short")
	}
	final := map[string]float64{}
	var mu sync.Mutex
	t.Run("run", func(t *testing.T) {
		for _, prec := range []string{"fp32", "bf16", "fp16"} {
			t.Run(prec, func(t *testing.T) {
				t.Parallel()
				_, job := initJob(t, "../testdata/models/gpt.ppm", Options{Load: LoadOptions{Preset: "tiny"}, Microbatches: 2, Optimizer: "adamw{lr=1e-2}", Precision: prec}, 1)
				var first, last, tail float64
				skipped := 0
				for i := 0; i < 200; i++ {
					r, err := job.Step(runtime.Options{Seed: 1})
					if err != nil {
						t.Fatal(err)
					}
					if i == 0 {
						first = r.Loss
					}
					if i >= 180 {
						tail += r.Loss / 20
					}
					last = r.Loss
					skipped += int(r.Metrics[passes.MetricOverflow])
				}
				t.Logf("%s: loss %.4f → %.4f (mean of the last 20 steps %.4f), %d step(s) skipped", prec, first, last, tail, skipped)
				if last > first/2 {
					t.Errorf("%s: loss fell from %.4f to %.4f, less than half", prec, first, last)
				}
				if prec != "fp16" && skipped > 0 {
					t.Errorf("%s: %d steps skipped for overflow", prec, skipped)
				}
				mu.Lock()
				final[prec] = tail
				mu.Unlock()
			})
		}
	})
	for _, prec := range []string{"bf16", "fp16"} {
		if low, f32 := final[prec], final["fp32"]; low > 1.1*f32 {
			t.Errorf("%s ends at loss %.4f (the last 20 steps' mean), more than 10%% above fp32's %.4f", prec, low, f32)
		}
	}
}

// TestSaveResumeBitwise: saving after 2 steps and resuming for 2 more gives exactly the
// parameters and optimizer state of 4 uninterrupted steps.
func TestSaveResumeBitwise(t *testing.T) {
	opts := Options{Load: LoadOptions{Preset: "tiny"}, Microbatches: 2, PP: 2}
	res, err := Compile("../testdata/models/gpt.ppm", opts)
	if err != nil {
		t.Fatal(err)
	}
	run := func(steps int, resume, save string) map[string][]float64 {
		job, err := runtime.New(res.Output, cpu.New())
		if err != nil {
			t.Fatal(err)
		}
		if err := job.Init(9); err != nil {
			t.Fatal(err)
		}
		if resume != "" {
			r, err := job.Resume(resume, false)
			if err != nil || r.Step != 2 || r.Seed != 9 || r.Warning != "" {
				t.Fatalf("resume: %+v: %v", r, err)
			}
		}
		for i := 0; i < steps; i++ {
			if _, err := job.Step(runtime.Options{Seed: 9}); err != nil {
				t.Fatal(err)
			}
		}
		if save != "" {
			if err := job.Save(save, 9); err != nil {
				t.Fatal(err)
			}
		}
		out := map[string][]float64{}
		for _, role := range []pb.Role{pb.Role_PARAM, pb.Role_STATE} {
			for n, b := range must(job.Buffers(role)) {
				out[n] = data.Float64s(b)
			}
		}
		return out
	}
	straight := run(4, "", "")
	dir := t.TempDir()
	run(2, "", dir)
	resumed := run(2, dir, "")
	for n, want := range straight {
		got := resumed[n]
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s[%d]: resumed %v, uninterrupted %v", n, i, got[i], want[i])
			}
		}
	}
	// The checkpoint resumes into another layout too (one rank instead of two).
	single, err := Compile("../testdata/models/gpt.ppm", Options{Load: LoadOptions{Preset: "tiny"}, Microbatches: 2})
	if err != nil {
		t.Fatal(err)
	}
	job, err := runtime.New(single.Output, cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	if r, err := job.Resume(dir, false); err != nil || r.Warning != "" {
		t.Fatalf("resume into one rank: %+v: %v", r, err)
	}
}

func TestCorruptCheckpoint(t *testing.T) {
	res, err := Compile("../testdata/ir/mlp.ir", Options{Microbatches: 1})
	if err != nil {
		t.Fatal(err)
	}
	job, err := runtime.New(res.Output, cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	job.Init(1)
	dir := t.TempDir()
	if err := job.Save(dir, 1); err != nil {
		t.Fatal(err)
	}
	shard := filepath.Join(dir, "step-00000000", "rank-00000.safetensors")
	index := filepath.Join(dir, checkpoint.IndexFile)
	good, _ := os.ReadFile(shard)
	goodIndex, _ := os.ReadFile(index)
	flipped := append([]byte{}, good...)
	flipped[len(flipped)-1] ^= 1
	edit := func(from, to string) []byte {
		if !strings.Contains(string(goodIndex), from) {
			t.Fatalf("the index lacks %q:\n%s", from, goodIndex)
		}
		return []byte(strings.Replace(string(goodIndex), from, to, 1))
	}
	cases := []struct {
		name, file string
		data       []byte
		want       string
	}{
		{"truncated shard", shard, good[:len(good)-7], "not the file the checkpoint wrote"},
		{"empty shard", shard, []byte{}, "not the file the checkpoint wrote"},
		{"flipped byte", shard, flipped, "corrupted or replaced"},
		{"missing shard", shard, nil, "no such file"},
		{"bad index", index, []byte("{nope"), "not a checkpoint index"},
		{"other format", index, edit(`"format": "ppc-checkpoint"`, `"format": "x"`), "not a ppc checkpoint index"},
		{"escaping dir", index, edit(`"dir": "step-00000000"`, `"dir": ".."`), "bad step"},
		{"block outside", index, edit(`"offset": [`, `"offset": [5,`), "does not fit"},
		{"no blocks", index, edit(`"blocks": [`, `"blocks": [], "x": [`), "cover 0 of"},
		// A shape the shard files cannot fill is refused before anything is allocated (the
		// tensors' shapes, which follow their dtypes; the blocks' keep theirs).
		{"huge shape", index, []byte(regexp.MustCompile(`("dtype": "\w+",\s*"shape": \[\s*)(\d+),`).ReplaceAllString(string(goodIndex), `${1}${2}000000000,`)), "its blocks cover"},
	}
	for _, c := range cases {
		os.WriteFile(shard, good, 0o644)
		os.WriteFile(index, goodIndex, 0o644)
		if c.data == nil {
			os.Remove(c.file)
		} else {
			os.WriteFile(c.file, c.data, 0o644)
		}
		var ie *fault.InputError
		if _, err := job.Resume(dir, false); err == nil || !asInputError(err, &ie) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an input error saying %q", c.name, err, c.want)
		}
	}
}

func asInputError(err error, target **fault.InputError) bool {
	e, ok := err.(*fault.InputError)
	if ok {
		*target = e
	}
	return ok
}

// TestTokenStreamData trains from a nanoGPT-style uint16 token file.
func TestTokenStreamData(t *testing.T) {
	res, err := Compile("../testdata/models/gpt.ppm", Options{Load: LoadOptions{Preset: "tiny"}, Microbatches: 2})
	if err != nil {
		t.Fatal(err)
	}
	job, err := runtime.New(res.Output, cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	job.Init(1)
	path := filepath.Join(t.TempDir(), "train.bin")
	toks := make([]byte, 2*5000)
	for i := 0; i < 5000; i++ {
		binary.LittleEndian.PutUint16(toks[2*i:], uint16(i*7%512))
	}
	os.WriteFile(path, toks, 0o644)
	src, _, err := data.Open(path, job.Plan, data.Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	r, err := job.Step(runtime.Options{Seed: 1, Data: src})
	if err != nil || r.Loss < 5 || r.Loss > 7 {
		t.Fatalf("loss %v, err %v", r.Loss, err)
	}
	// A token beyond the vocabulary is refused up front.
	binary.LittleEndian.PutUint16(toks[100:], 60000)
	os.WriteFile(path, toks, 0o644)
	if _, _, err := data.Open(path, job.Plan, data.Options{Seed: 1}); err == nil {
		t.Fatal("out-of-vocabulary token accepted")
	}
	odd := filepath.Join(t.TempDir(), "odd.bin")
	os.WriteFile(odd, toks[:11], 0o644)
	if _, _, err := data.Open(odd, job.Plan, data.Options{Seed: 1}); err == nil {
		t.Fatal("odd-length token file accepted")
	}
}
