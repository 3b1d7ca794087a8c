package main

import (
	"flag"
	"fmt"
	"os"

	"google.golang.org/protobuf/proto"

	"ppc.dev/ppc/codegen"
	pb "ppc.dev/ppc/codegen/programpb"
)

func init() {
	commands = append(commands, &command{
		name: "dis", args: "FILE.ppx",
		summary: "Print a compiled rank program as text: buffers, kernels and the instruction stream.",
		setup: func(fs *flag.FlagSet, e *env) func([]string) error {
			return func(args []string) error {
				if len(args) != 1 {
					return usagef("want one program file, got %d arguments", len(args))
				}
				data, err := os.ReadFile(args[0])
				if err != nil {
					return trimPathError(err)
				}
				p := &pb.Program{}
				if err := proto.Unmarshal(data, p); err != nil {
					return fmt.Errorf("%s: not a ppc program: %v", args[0], err)
				}
				if p.FormatVersion != codegen.FormatVersion {
					return fmt.Errorf("%s: not a ppc program (format version %d)", args[0], p.FormatVersion)
				}
				fmt.Fprint(e.stdout, codegen.Disassemble(p))
				return nil
			}
		},
	})
}
