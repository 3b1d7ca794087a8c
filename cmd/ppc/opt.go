package main

import (
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strings"

	"ppc.dev/ppc/compiler"
	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/passes"
)

func init() {
	commands = append(commands, &command{
		name: "opt", args: "FILE.ir --passes=P1,P2,… [flags]",
		summary: "Run a pipeline of passes over an IR file and print the result ('-' reads standard input).",
		setup: func(fs *flag.FlagSet, e *env) func([]string) error {
			pipeline := fs.String("passes", "", "the `PIPELINE`: pass names separated by commas, options as name{key=value} (see 'ppc passes')")
			var cfg passes.Config
			fs.BoolVar(&cfg.VerifyEach, "verify-each", true, "verify the input and the IR after every pass")
			fs.BoolVar(&cfg.PrintAfterAll, "print-ir-after-all", false, "print the IR after every pass (to standard error)")
			fs.BoolVar(&cfg.PrintAfterChange, "print-ir-after-change", false, "print the IR after each pass that changed it")
			var before, after listFlag
			fs.Var(&before, "print-ir-before", "print the IR before the named `PASS` (repeatable)")
			fs.Var(&after, "print-ir-after", "print the IR after the named `PASS` (repeatable)")
			fs.StringVar(&cfg.DumpDir, "dump-dir", "", "write the IR after each pass to `DIR`/NN-pass.ir, replacing the NN-*.ir files an earlier run wrote there (other files stay)")
			elide := fs.Int("elide-data", 0, "print dense data with more than `N` elements as 'elided' (0: print all)")
			return func(args []string) error {
				if len(args) != 1 {
					return usagef("want one IR file, got %d arguments", len(args))
				}
				switch ext := strings.ToLower(filepath.Ext(args[0])); ext {
				case ".ppm", ".onnx":
					return usagef("%s is a model, not IR text; print its IR with 'ppc import %s --elide-data 0 > model.ir' and run opt on that", args[0], args[0])
				}
				if *elide < 0 {
					return usagef("--elide-data must be non-negative")
				}
				pl, err := passes.ParsePipeline(*pipeline)
				if err != nil {
					return usagef("--passes: %v", err)
				}
				for _, name := range append(append([]string{}, before...), after...) {
					if passes.Lookup(name) == nil {
						return usagef("--print-ir-before/after: unknown pass %q", name)
					}
				}
				if cfg.DumpDir != "" {
					if err := checkWritableDir(cfg.DumpDir); err != nil {
						return fmt.Errorf("--dump-dir: %v", err)
					}
				}
				text, err := readInput(e, args[0])
				if err != nil {
					return err
				}
				name := args[0]
				if name == "-" {
					name = "<stdin>"
				}
				m, err := ir.Parse(name, text)
				if err != nil {
					return err
				}
				cfg.PrintBefore, cfg.PrintAfter = before, after
				cfg.Out = e.stderr
				cfg.PrintOptions = ir.PrintOptions{ElideAbove: *elide}
				if err := passes.Run(m, pl, cfg); err != nil {
					return err
				}
				_, err = e.stdout.Write(m.Append(nil, cfg.PrintOptions))
				return err
			}
		},
	})
}

type passesConfig = passes.Config

func knownPass(name string) bool { return passes.Lookup(name) != nil }

// isFailedCheck reports errors that are failed validations rather than bad input (exit 1):
// a schedule that deadlocks or misses a dependency.
func isFailedCheck(err error) bool {
	var se *compiler.ScheduleError
	return errors.As(err, &se)
}

// isInternal reports errors that are bugs in ppc rather than in the input (exit 1).
func isInternal(err error) bool {
	var pe *passes.PassError
	return errors.As(err, &pe) && pe.Internal
}
