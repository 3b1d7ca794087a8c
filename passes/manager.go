package passes

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"

	"ppc.dev/ppc/ir"
)

// Config controls the pass manager's checking and dumping.
type Config struct {
	// VerifyEach runs the verifier on the input and after every pass (on by default in the
	// CLI, always on in tests).
	VerifyEach bool
	// PrintAfterAll, PrintBefore, PrintAfter and PrintAfterChange write the IR to Out, with a
	// header naming the pass, as MLIR's --print-ir-* flags do.
	PrintAfterAll    bool
	PrintBefore      []string
	PrintAfter       []string
	PrintAfterChange bool
	Out              io.Writer
	// DumpDir, when set, receives one numbered file per pass: 00-input.ir, 01-canonicalize.ir…
	// Run first removes the numbered files an earlier run left there (and nothing else), so
	// that the directory shows this run's pipeline only.
	DumpDir string
	// ReproDir is where the reproducer of an internal failure goes (default DumpDir, else the
	// system's temporary directory).
	ReproDir string
	// PrintOptions apply to every dump.
	PrintOptions ir.PrintOptions
	// NoReproducer skips the copy of each pass's input that a reproducer is written from:
	// probe compiles (the planner runs dozens) report a failure without one.
	NoReproducer bool
}

// PassError is a pass failure: the pass's own error, a verifier error after it, or a panic
// inside it.
//
// The error a pass returns is about its input: a bad option (a --layout that does not cover
// the model, a --mem nothing fits in, more stages than the model has) or IR it cannot handle,
// each with the position in the user's file. The user fixes the input; ppc exits 2.
// A verifier failure after the pass or a panic in it is a bug in ppc (Internal): ppc exits 1
// and writes a reproducer, the path of a .ir file holding the pass's input and the rest of
// the pipeline as a RUN line, runnable as a test under testdata/passes. A user's mistake gets
// no reproducer: it would be a file in the temporary directory for every typo, and a bug
// report made of it would be about the user's input, not about ppc.
type PassError struct {
	Pass       string
	Err        error
	Reproducer string // "" unless Internal
	Internal   bool   // a verifier failure or panic: a bug in the pass, not in the input
}

func (e *PassError) Error() string {
	var b strings.Builder
	if e.Internal {
		fmt.Fprintf(&b, "internal error in pass %s: %v", e.Pass, e.Err)
	} else {
		fmt.Fprintf(&b, "pass %s: %v", e.Pass, e.Err)
	}
	if e.Reproducer != "" {
		fmt.Fprintf(&b, "\nreproducer: %s", e.Reproducer)
	}
	return b.String()
}

func (e *PassError) Unwrap() error { return e.Err }

// Run runs the pipeline over m in place.
func Run(m *ir.Module, pl Pipeline, cfg Config) error {
	out := cfg.Out
	if out == nil {
		out = io.Discard
	}
	if cfg.VerifyEach {
		if err := ir.Verify(m); err != nil {
			return err
		}
	}
	if cfg.DumpDir != "" {
		if err := os.MkdirAll(cfg.DumpDir, 0o755); err != nil {
			return err
		}
		if err := clearDumps(cfg.DumpDir); err != nil {
			return err
		}
		if err := dump(m, cfg, filepath.Join(cfg.DumpDir, "00-input.ir")); err != nil {
			return err
		}
	}
	// Keep the pipeline's input so that a failing pass's input can be rebuilt, by running the
	// passes before it again (they are deterministic: compiling twice writes the same
	// programs), and written as a reproducer. One copy, not one before every pass: the
	// copies were a tenth of a GPT-3 compile's time once the rank programs held the
	// optimizer and the reductions.
	var input *ir.Module
	if !cfg.NoReproducer {
		input = m.Clone()
	}
	for i, step := range pl {
		name := step.Pass.Name
		if contains(cfg.PrintBefore, name) {
			printIR(out, m, "before "+step.String(), cfg.PrintOptions)
		}
		var before string
		if cfg.PrintAfterChange {
			before = string(m.Append(nil, cfg.PrintOptions))
		}
		err, internal := runStep(m, step)
		if err == nil && cfg.VerifyEach {
			if verr := ir.Verify(m); verr != nil {
				err, internal = fmt.Errorf("the IR it produced does not verify:\n%v", verr), true
			}
		}
		if err != nil {
			pe := &PassError{Pass: name, Err: err, Internal: internal}
			if internal && input != nil {
				if snapshot := replay(input, pl[:i]); snapshot != nil {
					pe.Reproducer = writeReproducer(snapshot, pl[i:], cfg, i+1, err)
				}
			}
			return pe
		}
		switch {
		case cfg.PrintAfterAll || contains(cfg.PrintAfter, name):
			printIR(out, m, "after "+step.String(), cfg.PrintOptions)
		case cfg.PrintAfterChange:
			if after := string(m.Append(nil, cfg.PrintOptions)); after != before {
				fmt.Fprintf(out, "// === IR after %s ===\n%s\n", step.String(), after)
			}
		}
		if cfg.DumpDir != "" {
			if err := dump(m, cfg, filepath.Join(cfg.DumpDir, fmt.Sprintf("%02d-%s.ir", i+1, name))); err != nil {
				return err
			}
		}
	}
	return nil
}

// runStep runs one pass, turning a panic into an internal error with its stack.
// replay runs the steps over input again and returns the IR they leave: the input of the
// step after them. Nil when one of them fails this time (no reproducer then).
func replay(input *ir.Module, steps []Step) *ir.Module {
	for _, step := range steps {
		if err, _ := runStep(input, step); err != nil {
			return nil
		}
	}
	return input
}

func runStep(m *ir.Module, step Step) (err error, internal bool) {
	defer func() {
		if r := recover(); r != nil {
			err, internal = fmt.Errorf("panic: %v\n%s", r, debug.Stack()), true
		}
	}()
	return step.Pass.Run(m, step.Options), false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func printIR(w io.Writer, m *ir.Module, what string, opt ir.PrintOptions) {
	fmt.Fprintf(w, "// === IR %s ===\n%s\n", what, m.Append(nil, opt))
}

// dumpNameRE matches the files Run dumps: NN-pass.ir (NN from 00, more digits past 99).
var dumpNameRE = regexp.MustCompile(`^[0-9]{2,}-[a-z][a-z0-9-]*\.ir$`)

// clearDumps removes the dumps of an earlier run from dir: a shorter pipeline would otherwise
// leave its predecessor's later passes beside its own, looking like part of this run.
// Other files (the user's, reproducers) stay.
func clearDumps(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Type().IsRegular() && dumpNameRE.MatchString(e.Name()) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

func dump(m *ir.Module, cfg Config, path string) error {
	return os.WriteFile(path, m.Append(nil, cfg.PrintOptions), 0o644)
}

// writeReproducer saves the input of a pass that failed internally with a RUN line for the
// remaining pipeline.
// It returns the path, or "" when it cannot write one (the error itself still reaches the user).
func writeReproducer(in *ir.Module, rest Pipeline, cfg Config, index int, err error) string {
	dir := cfg.ReproDir
	if dir == "" {
		dir = cfg.DumpDir
	}
	if dir == "" {
		dir = os.TempDir()
	}
	if os.MkdirAll(dir, 0o755) != nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "// RUN: passes=%s\n", rest.String())
	fmt.Fprintf(&b, "// Reproducer for a failure of pass %s (step %d):\n", rest[0].Pass.Name, index)
	for _, line := range strings.Split(err.Error(), "\n") {
		fmt.Fprintf(&b, "//   %s\n", line)
	}
	b.WriteString("\n")
	// Print with full data: a reproducer must run.
	b.Write(in.Append(nil, ir.PrintOptions{}))
	f, ferr := os.CreateTemp(dir, fmt.Sprintf("ppc-repro-%02d-%s-*.ir", index, rest[0].Pass.Name))
	if ferr != nil {
		return ""
	}
	defer f.Close()
	if _, werr := f.WriteString(b.String()); werr != nil {
		return ""
	}
	return f.Name()
}
