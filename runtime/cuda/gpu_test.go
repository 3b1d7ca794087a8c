package cuda

import (
	"os"
	"testing"
)

// gpuDevice opens the CUDA device on GPU 0 (kernels cached where ppc run caches them), or
// skips the test or benchmark with one line on a machine without a usable GPU.
func gpuDevice(t testing.TB) (*Device, GPU) {
	r := Probe(nil)
	if err := r.Usable(); err != nil {
		t.Skipf("no CUDA GPU here (%v)", err)
	}
	dev, err := Open(r, 0, false, DefaultCacheDir(os.Getenv))
	if err != nil {
		t.Fatal(err)
	}
	gpu := r.GPUs[0]
	t.Logf("GPU 0: %s, sm_%d%d, driver %d", gpu.Name, gpu.Major, gpu.Minor, r.Driver)
	return dev, gpu
}

// TestGPUKernels runs every kernel case on the GPU, through the real driver, NVRTC and the
// CUDA device, against the CPU device (the host test's cases and tolerances). It runs by
// itself on a machine with an NVIDIA driver, a GPU, NVRTC and cuBLASLt, and skips with one
// line elsewhere.
func TestGPUKernels(t *testing.T) {
	dev, _ := gpuDevice(t)
	checkKernels(t, ewCases(), dev)
}

// TestGPUTrainsLikeCPU is the equivalence grid of TestCUDADeviceTrainsLikeCPU on the GPU:
// the tiny GPT and Llama at several meshes train like the CPU device (rtol 1e-4 in fp32).
func TestGPUTrainsLikeCPU(t *testing.T) {
	dev, _ := gpuDevice(t)
	trainGrid(t, dev)
}
