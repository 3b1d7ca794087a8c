package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/protobuf/proto"

	"ppc.dev/ppc/codegen"
	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/kernels/cuda"
	"ppc.dev/ppc/runtime"
)

func init() {
	commands = append(commands, &command{
		name: "dis", args: "FILE.ppx | DIR [--cuda]",
		summary: "Print a compiled program as text: buffers, kernels and the instruction stream (every program's, one per pipeline rank, for a plan directory); --cuda prints the CUDA C of its kernels instead.",
		setup: func(fs *flag.FlagSet, e *env) func([]string) error {
			asCUDA := fs.Bool("cuda", false, "print the CUDA C of every kernel launch site (with ppc_cuda.h first) instead of the program text")
			return func(args []string) error {
				if len(args) != 1 {
					return usagef("want one program file or plan directory, got %d arguments", len(args))
				}
				var files []string
				var plan *codegen.Plan
				if st, err := os.Stat(args[0]); err == nil && st.IsDir() {
					if plan, err = codegen.ReadPlan(args[0]); err != nil {
						return err
					}
					for _, pr := range plan.Programs {
						files = append(files, filepath.Join(args[0], pr.File))
					}
				} else {
					files = []string{args[0]}
					// A program beside its plan.json is checked against the checksum the plan
					// records; a lone program (or a plan.json that does not read) is shown as
					// it is.
					plan, _ = codegen.ReadPlan(filepath.Dir(args[0]))
				}
				if *asCUDA {
					return printCUDA(e.stdout, files, plan)
				}
				for i, path := range files {
					text, err := disassemble(path, plan)
					if err != nil {
						return err
					}
					if i > 0 {
						text = "\n" + text
					}
					if _, err := fmt.Fprint(e.stdout, text); err != nil {
						return err
					}
				}
				return nil
			}
		},
	})
}

// disassemble reads one program file, checks it against plan's checksum when plan lists it,
// and returns its text.
func disassemble(path string, plan *codegen.Plan) (string, error) {
	p, err := readProgram(path, plan)
	if err != nil {
		return "", err
	}
	return codegen.Disassemble(p), nil
}

// printCUDA writes the CUDA C of every launch site of the programs: the portability header
// once, then one kernel per launch site, named after its file and position. Launch sites
// whose op has no CUDA kernel yet are listed in a comment, so the output always compiles.
func printCUDA(w io.Writer, files []string, plan *codegen.Plan) error {
	var ks []cuda.Kernel
	var missing, gemms []string
	collSeen, collKernels := map[string]bool{}, 0
	for _, path := range files {
		p, err := readProgram(path, plan)
		if err != nil {
			return err
		}
		specs, err := runtime.LaunchSpecs(p)
		if err != nil {
			return fmt.Errorf("%s: %v", path, err)
		}
		stem := strings.NewReplacer("-", "_", ".", "_").Replace(strings.TrimSuffix(filepath.Base(path), filepath.Ext(path)))
		for i, s := range specs {
			name := fmt.Sprintf("%s_k%d", stem, i)
			if s.Name() == "matmul" {
				if calls, err := cuda.PlanMatmul(s, false); err == nil {
					for _, c := range calls {
						gemms = append(gemms, fmt.Sprintf("%s: cuBLASLt %s, op(A) %s, op(B) %s, M %d N %d K %d, ld %d/%d/%d, batch %d (strides %d/%d/%d), offsets %d/%d/%d, bias %t",
							name, c.Compute, opName(c.TransA), opName(c.TransB), c.M, c.N, c.K, c.LDA, c.LDB, c.LDC, c.Batch, c.StrideA, c.StrideB, c.StrideC, c.OffA, c.OffB, c.OffC, c.Bias))
					}
					continue
				}
			}
			if s.Name() == "constant" || s.Name() == "reshape" {
				continue // copied from the host at launch; a device-to-device copy
			}
			k, err := cuda.Kernels(s, name)
			if err != nil {
				missing = append(missing, fmt.Sprintf("%s: %s", name, s.Name()))
				continue
			}
			ks = append(ks, k...)
		}
		// With NCCL, collectives run kernels too: the permutes of gathers and scatters along
		// inner dims and the ordered folds of float reductions (member 0's; identical ones
		// once).
		if plan == nil {
			continue
		}
		colls, err := runtime.CollectiveSpecs(p, plan.Mesh)
		if err != nil {
			return fmt.Errorf("%s: %v", path, err)
		}
		for _, c := range colls {
			k, err := cuda.CollectiveKernels(c.Coll, c.Size, 0)
			if err != nil {
				missing = append(missing, fmt.Sprintf("%s: %v over %d ranks: %v", stem, c.Coll.Kind, c.Size, err))
				continue
			}
			for _, k := range k {
				if !collSeen[k.Name] {
					collSeen[k.Name] = true
					ks = append(ks, k)
					collKernels++
				}
			}
		}
	}
	if _, err := fmt.Fprint(w, cuda.Source(ks...)); err != nil {
		return err
	}
	if len(gemms) > 0 {
		fmt.Fprintf(w, "\n// %d cuBLASLt call(s) for the matmul launch sites (column-major: A is the IR's second operand):\n", len(gemms))
		for _, g := range gemms {
			fmt.Fprintf(w, "//   %s\n", g)
		}
	}
	if collKernels > 0 {
		fmt.Fprintf(w, "\n// %d of the kernels (permute_*, fold_*) are the collectives' in runs where NCCL carries them.\n", collKernels)
	}
	if len(missing) > 0 {
		fmt.Fprintf(w, "\n// %d launch site(s) without a CUDA kernel:\n", len(missing))
		for _, m := range missing {
			fmt.Fprintf(w, "//   %s\n", m)
		}
	}
	return nil
}

// readProgram reads and checks one program file.
func readProgram(path string, plan *codegen.Plan) (*pb.Program, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, trimPathError(err)
	}
	if plan != nil {
		// Before decoding: a flipped byte is corruption, not "cannot parse".
		if err := plan.CheckProgramBytes(filepath.Base(path), data); err != nil {
			return nil, fmt.Errorf("%s: %v", path, err)
		}
	}
	p := &pb.Program{}
	if err := proto.Unmarshal(data, p); err != nil {
		return nil, fmt.Errorf("%s: not a ppc program: %v", path, err)
	}
	if p.FormatVersion != codegen.FormatVersion {
		return nil, fmt.Errorf("%s: not a ppc program (format version %d)", path, p.FormatVersion)
	}
	return p, nil
}

func opName(t bool) string {
	if t {
		return "T"
	}
	return "N"
}
