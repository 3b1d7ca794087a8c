package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	goruntime "runtime"
	"strings"

	"ppc.dev/ppc/codegen"
	"ppc.dev/ppc/kernels/cpu"
	"ppc.dev/ppc/runtime/cuda"
)

func init() {
	commands = append(commands, &command{
		name: "devices", args: "[--json]",
		summary: "List the devices ppc can run on: the CPU, and for CUDA what it found (driver, GPUs, NVRTC, cuBLASLt, NCCL) or exactly what is missing.",
		setup: func(fs *flag.FlagSet, e *env) func([]string) error {
			asJSON := fs.Bool("json", false, "print the CUDA probe as JSON")
			return func(args []string) error {
				if len(args) != 0 {
					return usagef("takes no arguments, got %d", len(args))
				}
				r := cuda.Probe(e.getenvFunc())
				if *asJSON {
					return printJSON(e.stdout, r)
				}
				printDevices(e.stdout, r)
				return nil
			}
		},
	})
}

// cpuModel is the CPU's model name from /proc/cpuinfo ("" elsewhere).
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func printDevices(w io.Writer, r *cuda.Report) {
	model := cpuModel()
	if model == "" {
		model = goruntime.GOARCH
	}
	fmt.Fprintf(w, "cpu    available: %s, %d cores, GEMM kernel %s (--device cpu, the reference device)\n", model, goruntime.NumCPU(), cpu.GEMMKernel())
	if err := r.Usable(); err != nil {
		fmt.Fprintf(w, "cuda   not available: %v\n", err)
	} else {
		fmt.Fprintf(w, "cuda   usable: ppc run --device cuda (one GPU per process)\n")
		if !r.Libraries[3].Found() {
			fmt.Fprintf(w, "       without NCCL, multi-process runs send messages through host memory and TCP\n")
		}
	}
	for _, l := range r.Libraries {
		switch {
		case l.Found() && l.Err == "":
			fmt.Fprintf(w, "       %-9s %-12s %s\n", l.Name, l.Version, l.Path)
		case l.Found():
			fmt.Fprintf(w, "       %-9s %-12s %s: %s\n", l.Name, "unusable", l.Path, l.Err)
		default:
			fmt.Fprintf(w, "       %-9s %-12s (%s)\n", l.Name, "not found", strings.Join(l.Sonames, ", "))
		}
	}
	if r.Err != "" {
		fmt.Fprintf(w, "       driver: %s\n", r.Err)
	}
	for _, g := range r.GPUs {
		fmt.Fprintf(w, "       GPU %d    %s, %s, compute capability %d.%d (sm_%d%d)\n", g.Index, g.Name, codegen.FormatBytes(g.Memory), g.Major, g.Minor, g.Major, g.Minor)
	}
}

// printJSON writes v as indented JSON (the --json of devices, plan and simulate).
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
