package cuda

import (
	"fmt"
	"testing"

	"ppc.dev/ppc/runtime/device"
)

// TestGPUKernels runs every kernel case on the GPU, through the real driver and NVRTC,
// against the CPU device (the host test's cases and tolerances). It runs by itself on a
// machine with an NVIDIA driver, a GPU and NVRTC, and skips with one line elsewhere.
func TestGPUKernels(t *testing.T) {
	r := Probe(nil)
	if err := r.Usable(); err != nil {
		t.Skipf("no CUDA GPU here (%v)", err)
	}
	d, err := OpenDriver(&r.Libraries[0], 0)
	if err != nil {
		t.Fatal(err)
	}
	nv, err := OpenNVRTC(&r.Libraries[1])
	if err != nil {
		t.Fatal(err)
	}
	gpu := r.GPUs[0]
	arch := fmt.Sprintf("sm_%d%d", gpu.Major, gpu.Minor)
	t.Logf("GPU 0: %s, %s, driver %d", gpu.Name, arch, r.Driver)
	cases := ewCases()
	ks := caseKernels(t, cases)
	ptx, err := nv.Compile(Source(ks...), "kernels.cu", arch)
	if err != nil {
		t.Fatal(err)
	}
	m, err := d.LoadModule(ptx)
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.StreamCreate()
	if err != nil {
		t.Fatal(err)
	}
	checkKernels(t, cases, ks, func(ci int, in []device.Tensor, out device.Tensor, grid, block int32) error {
		f, err := d.Function(m, ks[ci].Name)
		if err != nil {
			return err
		}
		var args []uint64
		var bufs []DevicePtr
		defer func() {
			for _, b := range bufs {
				d.MemFree(b)
			}
		}()
		for _, x := range append(append([]device.Tensor{}, in...), out) {
			p, err := d.MemAlloc(uint64(max(len(x.Data), 1)))
			if err != nil {
				return err
			}
			bufs = append(bufs, p)
			if err := d.CopyHtoD(p, x.Data, s); err != nil {
				return err
			}
			args = append(args, uint64(p))
		}
		if err := d.Launch(f, uint32(grid), uint32(block), s, append(args, uint64(ks[ci].N))...); err != nil {
			return err
		}
		if err := d.CopyDtoH(out.Data, bufs[len(bufs)-1], s); err != nil {
			return err
		}
		return d.StreamSync(s)
	})
}
