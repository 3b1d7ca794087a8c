package runtime_test

import (
	"os"
	"path/filepath"
	"testing"

	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/compiler"
	"ppc.dev/ppc/internal/jobtest"
	"ppc.dev/ppc/runtime"
	"ppc.dev/ppc/runtime/cpu"
	"ppc.dev/ppc/runtime/device"
)

const convNet = `module @convnet attributes {microbatches = 1}

func @forward(%x: f32[2,3,8,8] {input}, %labels: i64[2] {input, label, range = [0, 10]}, %w: f32[5,3,3,3] {init = "normal(0.3)", param}, %b: f32[5] {init = "normal(0.1)", param}, %w2: f32[320,10] {init = "normal(0.1)", param}) -> (f32[] {loss}) {
  %c = conv %x, %w, %b {pads = [1, 1, 1, 1]} : f32[2,5,8,8]
  %a = relu %c : f32[2,5,8,8]
  %f = reshape %a {shape = [2, 320]} : f32[2,320]
  %logits = matmul %f, %w2 : f32[2,10]
  %loss = cross_entropy %logits, %labels : f32[] {}
  return %loss
}
`

// specRecorder is the CPU device, noting which launch operands the loader marked constant.
type specRecorder struct {
	device.Device
	konst map[string][]bool // by op name
}

func (r *specRecorder) Prepare(s *device.Spec) (device.Impl, error) {
	r.konst[s.Name()] = s.Const
	return r.Device.Prepare(s)
}

// The loader marks a parameter constant only where no instruction writes it: in an inference
// plan the conv's weights and bias are, in a training plan (the optimizer updates them) not.
func TestLoaderMarksConstantParameters(t *testing.T) {
	src := filepath.Join(t.TempDir(), "convnet.ir")
	if err := os.WriteFile(src, []byte(convNet), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, fwd := range []bool{true, false} {
		dir := jobtest.Compile(t, src, compiler.Options{ForwardOnly: fwd, Microbatches: 1})
		rec := &specRecorder{Device: cpu.New(), konst: map[string][]bool{}}
		if _, err := runtime.Load(dir, rec); err != nil {
			t.Fatal(err)
		}
		// The relu after the conv is its epilogue: one launch site.
		got, ok := rec.konst["conv+relu"]
		if !ok {
			t.Fatalf("no conv+relu launch among %v", rec.konst)
		}
		if fwd && (len(got) != 3 || got[0] || !got[1] || !got[2]) {
			t.Fatalf("inference: conv's Const = %v, want [false true true]", got)
		}
		if !fwd && got != nil {
			t.Fatalf("training: conv's Const = %v, want none", got)
		}
	}
}

// Weights written between steps through a view Buffers handed out (before the first step)
// are the weights the next step computes with: the device's filter packed from the old ones
// is not reused (device.Constants).
func TestConstantWeightsWrittenBetweenSteps(t *testing.T) {
	src := filepath.Join(t.TempDir(), "convnet.ir")
	if err := os.WriteFile(src, []byte(convNet), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := jobtest.Compile(t, src, compiler.Options{ForwardOnly: true, Microbatches: 1})
	view := func(job *runtime.Job) device.Tensor {
		bufs, err := job.Buffers(pb.Role_PARAM)
		if err != nil {
			t.Fatal(err)
		}
		return bufs["w"]
	}
	scale := func(w device.Tensor) {
		for i, v := range w.F32() {
			w.F32()[i] = -2 * v
		}
	}
	load := func() *runtime.Job {
		job, err := runtime.Load(dir, cpu.New())
		if err != nil {
			t.Fatal(err)
		}
		if err := job.Init(7); err != nil {
			t.Fatal(err)
		}
		return job
	}
	step := func(job *runtime.Job) float64 {
		r, err := job.Step(runtime.Options{Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		return r.Loss
	}
	// Step 1 is the reference for the changed weights: the same data as the first job's
	// second step is the second job's second step.
	// The view is taken before the first step and written after it: a caller may hold it.
	a, b := load(), load()
	w := view(a)
	before := step(a)
	step(b)
	scale(w)
	after := step(a)
	c := load()
	scale(view(c))
	step(c)
	want := step(c)
	if after != want {
		t.Fatalf("loss after the weights changed %v, a job that started with them %v (before: %v)", after, want, before)
	}
	if again := step(b); again == after {
		t.Fatalf("the unchanged job's loss %v equals the changed one's", again)
	}
}
