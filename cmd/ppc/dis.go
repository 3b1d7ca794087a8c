package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"google.golang.org/protobuf/proto"

	"ppc.dev/ppc/codegen"
	pb "ppc.dev/ppc/codegen/programpb"
)

func init() {
	commands = append(commands, &command{
		name: "dis", args: "FILE.ppx | DIR",
		summary: "Print a compiled program as text: buffers, kernels and the instruction stream (every program's, one per pipeline rank, for a plan directory).",
		setup: func(fs *flag.FlagSet, e *env) func([]string) error {
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
	data, err := os.ReadFile(path)
	if err != nil {
		return "", trimPathError(err)
	}
	if plan != nil {
		// Before decoding: a flipped byte is corruption, not "cannot parse".
		if err := plan.CheckProgramBytes(filepath.Base(path), data); err != nil {
			return "", fmt.Errorf("%s: %v", path, err)
		}
	}
	p := &pb.Program{}
	if err := proto.Unmarshal(data, p); err != nil {
		return "", fmt.Errorf("%s: not a ppc program: %v", path, err)
	}
	if p.FormatVersion != codegen.FormatVersion {
		return "", fmt.Errorf("%s: not a ppc program (format version %d)", path, p.FormatVersion)
	}
	return codegen.Disassemble(p), nil
}
