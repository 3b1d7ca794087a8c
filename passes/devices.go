package passes

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"ppc.dev/ppc/ir"
)

// The device profiles: one table, each figure from its vendor's datasheet. Rates are dense
// (no structured sparsity) per GPU of the SXM parts; "each way" link bandwidths are per GPU
// per direction (NVLink's quoted totals are bidirectional). Inter-node bandwidth is the
// GPU's share of the node's network (one NIC per GPU in DGX/HGX systems).
var (
	// A100Like is the profile every plan used before the table existed: a rounded A100
	// with one matmul rate for every dtype. It stays the default so that plans and reports
	// keep their figures; name a real GPU with --gpu.
	A100Like = DeviceProfile{
		Name: "a100-like", PeakFLOPs: 300e12, VectorFLOPs: 20e12, MemBandwidth: 2e12,
		LinkBandwidth: 50e9, LinkLatency: 10e-6,
		IntraNodeBandwidth: 300e9, IntraNodeLatency: 5e-6, InterNodeBandwidth: 25e9, InterNodeLatency: 10e-6,
		GPUsPerNode: 8, Source: "rounded A100 figures, one matmul rate for every dtype",
	}
	// V100 is TeraPipe's machine (AWS p3.16xlarge): 8 V100 SXM2 16 GB per node, NVLink 2
	// (6 links × 25 GB/s each way), 25 Gbit/s of network per node, shared by its 8 GPUs;
	// pipeline neighbours on different nodes share that link.
	V100 = DeviceProfile{
		Name: "v100-16gb", PeakFLOPs: 125e12, PeakFP32: 15.7e12, PeakBF16: 15.7e12, PeakFP16: 125e12,
		VectorFLOPs: 31.4e12, MemBandwidth: 900e9, MemBytes: 16 << 30, GPUsPerNode: 8,
		LinkBandwidth: 25e9 / 8, LinkLatency: 30e-6,
		IntraNodeBandwidth: 150e9, IntraNodeLatency: 5e-6, InterNodeBandwidth: 25e9 / 8 / 8, InterNodeLatency: 30e-6,
		Source: "NVIDIA Tesla V100 datasheet (SXM2: 15.7 TFLOP/s fp32, 125 fp16 tensor, no bf16 tensor cores, 900 GB/s); AWS p3.16xlarge: 25 Gbit/s network",
	}
	A10040 = DeviceProfile{
		Name: "a100-40gb", PeakFLOPs: 312e12, PeakFP32: 19.5e12, PeakBF16: 312e12, PeakFP16: 312e12,
		VectorFLOPs: 78e12, MemBandwidth: 1555e9, MemBytes: 40 << 30, GPUsPerNode: 8,
		LinkBandwidth: 25e9, LinkLatency: 10e-6,
		IntraNodeBandwidth: 300e9, IntraNodeLatency: 5e-6, InterNodeBandwidth: 25e9, InterNodeLatency: 10e-6,
		GEMMEff: ampereGEMM, CollectiveEff: ampereCollective, LaunchSeconds: launchSeconds,
		Source: "NVIDIA A100 datasheet (SXM4 40GB: 19.5 TFLOP/s fp32, 312 bf16/fp16 tensor, 1,555 GB/s HBM2, NVLink 3 600 GB/s); DGX A100: 8× HDR 200 Gbit/s" + ampereAchieved,
	}
	A10080 = withMemory(A10040, "a100-80gb", 80<<30, 2039e9,
		"NVIDIA A100 datasheet (SXM4 80GB: 19.5 TFLOP/s fp32, 312 bf16/fp16 tensor, 2,039 GB/s HBM2e, NVLink 3 600 GB/s); DGX A100: 8× HDR 200 Gbit/s"+ampereAchieved)
	H100 = DeviceProfile{
		Name: "h100-80gb", PeakFLOPs: 989e12, PeakFP32: 67e12, PeakBF16: 989e12, PeakFP16: 989e12,
		VectorFLOPs: 134e12, MemBandwidth: 3350e9, MemBytes: 80 << 30, GPUsPerNode: 8,
		LinkBandwidth: 50e9, LinkLatency: 8e-6,
		IntraNodeBandwidth: 450e9, IntraNodeLatency: 4e-6, InterNodeBandwidth: 50e9, InterNodeLatency: 8e-6,
		GEMMEff: hopperGEMM, CollectiveEff: hopperCollective, LaunchSeconds: launchSeconds,
		Source: "NVIDIA H100 datasheet (SXM5: 67 TFLOP/s fp32, 989 bf16/fp16 tensor dense, 3.35 TB/s HBM3, NVLink 4 900 GB/s); DGX H100: 8× NDR 400 Gbit/s" + hopperAchieved,
	}
	H200 = withMemory(H100, "h200", 141e9, 4800e9,
		"NVIDIA H200 datasheet (SXM: 67 TFLOP/s fp32, 989 bf16/fp16 tensor dense, 141 GB HBM3e at 4.8 TB/s, NVLink 900 GB/s); HGX H200: 8× NDR 400 Gbit/s"+hopperAchieved)
)

// What each GPU generation achieves of its datasheet peaks: one set of figures per
// generation (Ampere: A100 40/80 GB; Hopper: H100, H200), measured by others or by ppc, never
// fitted to the runs the README compares against.
//
//   - GEMM: the largest fraction of the dense bf16 peak a cuBLAS GEMM reaches at its best
//     shape — Stas Bekman's Maximum Achievable Matmul FLOPS finder (ml-engineering,
//     compute/accelerator): A100 SXM 271.2 of 312 TFLOP/s (0.87), H100 SXM 794.5 of 989
//     (0.80); ppc's own cuBLASLt plans reach 792 / 793 TFLOP/s at 4096³ / 8192³ on an H100
//     (bench/NOTES.md). Smaller dims fall off by GEMMEfficiency's curve.
//   - Collectives: the bus bandwidth of NCCL's ring algorithm at large sizes, which is what
//     ppc's ring formulas price (NVLink SHARP's in-switch all-reduce, NCCL's default on 8
//     H100 since 2.17, is not modelled; its 460–480 GB/s "bus bandwidth" is above the wire's
//     450 GB/s and counts no wire). Ampere: NCCL's maintainer gives ~230 GB/s effective on 8
//     A100 SXM4 over NVLink 3 — 12 links at 25 GB/s line rate, ~20 GB/s each with 128-byte
//     payloads, a little lost elsewhere (NVIDIA/nccl-tests#149) — and nccl-tests reference
//     tables give 230–250 GB/s (https://docs.alayanew.com/en/docs/tech-blog/2026-05-06-nccl-tests):
//     0.77 of the 300 GB/s each way. Hopper: ~370 GB/s effective on H100 SXM over NVLink 4
//     after NCCL's ~20% protocol overhead, the busbw of non-all-reduce collectives or of
//     NCCL_ALGO=RING (NCCL's maintainer, NVIDIA/nccl-tests#212), and 365–370 GB/s measured
//     with NCCL_ALGO=RING on 8 H100 SXM for 2 to 8 GPUs (NVIDIA/nccl#1455): 0.82 of the 450
//     GB/s each way. The same fraction is applied to the inter-node links.
//   - Launches: each kernel costs 3–5 µs on the GPU even when tiny (bench/NOTES.md, an
//     H100 under ppc's runtime); 4 µs on both generations.
const (
	ampereGEMM, hopperGEMM             = 0.87, 0.80
	ampereCollective, hopperCollective = 0.77, 0.82
	launchSeconds                      = 4e-6
	ampereAchieved                     = "; achieved: GEMMs 0.87 of peak (MAMF finder: 271.2 TFLOP/s), collectives 0.77 of link bandwidth (NCCL ring bus bandwidth ~230 GB/s on 8 A100), 4 µs a kernel"
	hopperAchieved                     = "; achieved: GEMMs 0.80 of peak (MAMF finder: 794.5 TFLOP/s; ppc's cuBLASLt 793), collectives 0.82 of link bandwidth (NCCL ring bus bandwidth ~370 GB/s on 8 H100), 4 µs a kernel"
)

// withMemory is d with another memory: the same GPU with more or faster HBM.
func withMemory(d DeviceProfile, name string, bytes int64, bandwidth float64, source string) DeviceProfile {
	d.Name, d.MemBytes, d.MemBandwidth, d.Source = name, bytes, bandwidth, source
	return d
}

// Devices lists the device profiles by name.
var Devices = []DeviceProfile{A100Like, V100, A10040, A10080, H100, H200}

// DefaultDevice is the profile the cost model uses when a module names none.
var DefaultDevice = A100Like

// AttrDevice (on a module) names the device profile its cost estimates assume (--gpu).
const AttrDevice = "device"

// LookupDevice returns the profile named name.
func LookupDevice(name string) (DeviceProfile, bool) {
	for _, d := range Devices {
		if d.Name == name {
			return d, true
		}
	}
	return DeviceProfile{}, false
}

// DeviceNames lists the profiles' names, for messages and help.
func DeviceNames() string {
	names := make([]string, len(Devices))
	for i, d := range Devices {
		names[i] = d.Name
	}
	return strings.Join(names, ", ")
}

// ModuleDevice is the profile m's estimates assume: its device attribute, else the default.
func ModuleDevice(m *ir.Module) (DeviceProfile, error) {
	name := m.Attrs.Str(AttrDevice, "")
	if name == "" {
		return DefaultDevice, nil
	}
	return ParseDevice(name)
}

// deviceFields are the figures a device spec may override, by their JSON names.
func deviceFields(d *DeviceProfile) map[string]any {
	return map[string]any{
		"peak_flops": &d.PeakFLOPs, "peak_fp32": &d.PeakFP32, "peak_bf16": &d.PeakBF16, "peak_fp16": &d.PeakFP16,
		"vector_flops": &d.VectorFLOPs, "mem_bandwidth": &d.MemBandwidth, "mem_bytes": &d.MemBytes,
		"link_bandwidth": &d.LinkBandwidth, "link_latency": &d.LinkLatency,
		"intra_node_bandwidth": &d.IntraNodeBandwidth, "intra_node_latency": &d.IntraNodeLatency,
		"inter_node_bandwidth": &d.InterNodeBandwidth, "inter_node_latency": &d.InterNodeLatency,
		"gpus_per_node":   &d.GPUsPerNode,
		"gemm_efficiency": &d.GEMMEff, "collective_efficiency": &d.CollectiveEff, "launch_seconds": &d.LaunchSeconds,
	}
}

// ParseDevice reads a device spec: a profile's name, optionally with figures overridden as
// h100-80gb{inter_node_bandwidth=25e9,gpus_per_node=4} (the JSON names of DeviceProfile's
// fields; rates in per second, sizes in bytes, latencies in seconds). The profile's Name is
// the spec in a canonical form (keys sorted), so that a plan names exactly what it assumed
// and a module attribute holding it reads back the same profile.
func ParseDevice(spec string) (DeviceProfile, error) {
	spec = strings.TrimSpace(spec)
	name, rest, braced := strings.Cut(spec, "{")
	name = strings.TrimSpace(name)
	d, ok := LookupDevice(name)
	if !ok {
		return d, fmt.Errorf("unknown device profile %q (known: %s)", name, DeviceNames())
	}
	if !braced {
		return d, nil
	}
	body, ok := strings.CutSuffix(strings.TrimSpace(rest), "}")
	if !ok {
		return d, fmt.Errorf("device %q: the overrides must end with '}'", spec)
	}
	fields := deviceFields(&d)
	var keys []string
	seen := map[string]string{}
	for _, kv := range strings.Split(body, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok {
			return d, fmt.Errorf("device %q: %q is not KEY=VALUE", spec, kv)
		}
		field, known := fields[k]
		if !known {
			names := make([]string, 0, len(fields))
			for n := range fields {
				names = append(names, n)
			}
			sort.Strings(names)
			return d, fmt.Errorf("device %q: unknown figure %q (known: %s)", spec, k, strings.Join(names, ", "))
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || !(x > 0) || x > 1e30 {
			return d, fmt.Errorf("device %q: %s=%s: want a positive number", spec, k, v)
		}
		// Counts and byte sizes are whole numbers, written as such in the canonical name
		// (mem_bytes=103079215104, not 1.03079215104e+11); 2^53 keeps them exact.
		canon := strconv.FormatFloat(x, 'g', -1, 64)
		switch f := field.(type) {
		case *float64:
			*f = x
		case *int64, *int:
			if x != math.Trunc(x) || x > 1<<53 {
				return d, fmt.Errorf("device %q: %s=%s: want a whole number up to 2^53", spec, k, v)
			}
			canon = strconv.FormatInt(int64(x), 10)
			if p, ok := f.(*int64); ok {
				*p = int64(x)
			} else {
				*f.(*int) = int(x)
			}
		}
		if _, dup := seen[k]; !dup {
			keys = append(keys, k)
		}
		seen[k] = canon
	}
	if len(keys) == 0 {
		return d, nil
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + seen[k]
	}
	d.Name = name + "{" + strings.Join(parts, ",") + "}"
	d.Source += "; overridden: " + strings.Join(parts, ", ")
	return d, nil
}
