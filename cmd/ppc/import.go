package main

import (
	"flag"
	"path/filepath"
	"strings"

	"ppc.dev/ppc/compiler"
	"ppc.dev/ppc/ir"
)

func init() {
	commands = append(commands, &command{
		name: "import", args: "MODEL [--dim k=v]… [--set k=v]… [--preset P]",
		summary: "Import a model (.onnx, .ppm or .ir) and print its verified IR.",
		setup: func(fs *flag.FlagSet, e *env) func([]string) error {
			var lf loadFlags
			lf.register(fs)
			mb := fs.Int("microbatches", 1, "import one micro-batch of the global batch split `M` ways")
			elide := fs.Int("elide-data", 64, "print dense data with more than `N` elements as 'elided' (0: print all, so the output parses back)")
			return func(args []string) error {
				if len(args) != 1 {
					return usagef("want one model file, got %d arguments", len(args))
				}
				lo, err := lf.options()
				if err != nil {
					return err
				}
				if *mb < 1 {
					return usagef("--microbatches must be at least 1")
				}
				if *elide < 0 {
					return usagef("--elide-data must be non-negative")
				}
				// IR text is already one micro-batch (its shapes are what compile runs M
				// times), so there is nothing to split; say so rather than ignore the flag.
				if *mb > 1 && strings.EqualFold(filepath.Ext(args[0]), ".ir") {
					return usagef("--microbatches applies to .ppm and .onnx models; an .ir file's shapes are already one micro-batch's")
				}
				lo.Microbatches = *mb
				m, _, err := compiler.Load(args[0], lo)
				if err != nil {
					return err
				}
				_, err = e.stdout.Write(m.Append(nil, ir.PrintOptions{ElideAbove: *elide}))
				return err
			}
		},
	})
}
