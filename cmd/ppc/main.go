// Command ppc is the ppc toolchain's command-line interface: flags and printing only; every
// decision lives in the packages it calls.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"ppc.dev/ppc/runtime"
	"ppc.dev/ppc/runtime/dist"
)

// command is one `ppc` subcommand.
type command struct {
	name, args, summary string
	// flags declares the command's flags on fs and returns the function that runs it.
	setup func(fs *flag.FlagSet, env *env) func(args []string) error
}

// env is what a command sees of the outside world, so tests run the CLI in-process.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	// interrupts starts delivering SIGINT and SIGTERM to a command that stops cleanly on
	// them (ppc run); stop restores their default effect. Nil: they keep it.
	interrupts func() (sigs <-chan os.Signal, stop func())
	// getenv reads the environment (nil: the process's); tests give a launcher's variables.
	getenv func(string) string
	// exit ends the process at once with a status (nil: os.Exit): a second interrupt.
	exit func(code int)
}

func (e *env) exitNow(code int) {
	if e.exit != nil {
		e.exit(code)
		return
	}
	os.Exit(code)
}

func (e *env) getenvFunc() func(string) string {
	if e.getenv != nil {
		return e.getenv
	}
	return os.Getenv
}

var commands []*command // filled in by init functions of the command files, sorted in main

// Exit statuses (docs/DESIGN.md §11). Every command follows one policy, applied by report:
//
//   - 0: success.
//   - 1: the input was fine, and the answer is no or the work could not finish: a failed
//     check (compare finds a difference, a schedule deadlocks, training diverges); an
//     internal error (a pass's output fails the verifier, a pass panics: a bug in ppc, with
//     a reproducer); a runtime failure (ranks hang or deadlock, a kernel fails during a
//     step); an I/O error writing an output (a full disk or quota, a write that fails after
//     the file was created). Running the same command again on a healthy machine, or a fix
//     in ppc, is what helps.
//   - 2: bad input or usage: a flag, a model, a plan, a data file, or an output path that
//     cannot be created (a file where a directory should be, a missing parent). Changing
//     the command line or the files is what helps.
//   - 130: interrupted (SIGINT or SIGTERM), as shells report it.
//
// Errors are classified by type, never by message: usageError, checkFailed, the compiler's
// ScheduleError, an internal passes.PassError, runtime.RunError, and the os errors of a
// failed write; anything else is bad input.
const (
	exitOK     = 0
	exitFailed = 1 // a failed check, an internal error, a runtime failure, a failed write
	exitInput  = 2 // bad input or usage
	// exitInterrupted: stopped by SIGINT or SIGTERM, after writing what was done; 128 + 2,
	// as a shell reports a process killed by SIGINT.
	exitInterrupted = 130
)

// usageError reports a bad command line; it exits 2 and prints the command's usage hint.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// checkFailed reports a failed check (exit 1).
type checkFailed struct{ err error }

func (e checkFailed) Error() string { return e.err.Error() }
func (e checkFailed) Unwrap() error { return e.err }

// interrupted reports a command stopped by a signal (exit 130); msg says what it wrote.
type interrupted struct{ msg string }

func (e interrupted) Error() string { return e.msg }

func main() {
	os.Exit(run(os.Args[1:], &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, interrupts: notifySignals}))
}

func notifySignals() (<-chan os.Signal, func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	return ch, func() { signal.Stop(ch) }
}

func findCommand(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// run executes one command line and returns the exit status.
func run(args []string, e *env) int {
	sort.Slice(commands, func(i, j int) bool { return commands[i].name < commands[j].name })
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-version") {
		args = []string{"version"} // the spelling most tools accept
	}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		if len(args) > 1 {
			c := findCommand(args[1])
			if c == nil {
				fmt.Fprintf(e.stderr, "ppc help: unknown command %q\nRun 'ppc help' for the list of commands.\n", args[1])
				return exitInput
			}
			printCommandHelp(c, e.stdout)
			return exitOK
		}
		printHelp(e.stdout)
		if len(args) == 0 {
			return exitInput
		}
		return exitOK
	}
	c := findCommand(args[0])
	if c == nil {
		fmt.Fprintf(e.stderr, "ppc: unknown command %q\nRun 'ppc help' for the list of commands.\n", args[0])
		return exitInput
	}
	fs := flag.NewFlagSet("ppc "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	runFn := c.setup(fs, e)
	positional, err := parseArgs(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		printCommandHelp(c, e.stdout)
		return exitOK
	}
	if err == nil {
		err = runFn(positional)
	}
	return report(c, err, e.stderr)
}

// report prints err and maps it to an exit status.
func report(c *command, err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	var ue usageError
	var cf checkFailed
	var ie interrupted
	switch {
	case errors.As(err, &ie):
		fmt.Fprintf(stderr, "ppc %s: %v\n", c.name, err)
		return exitInterrupted
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "ppc %s: %v\nusage: %s\nRun 'ppc %s --help' for details.\n", c.name, err, strings.TrimSpace("ppc "+c.name+" "+c.args), c.name)
		return exitInput
	case errors.As(err, &cf):
		fmt.Fprintf(stderr, "ppc %s: %v\n", c.name, err)
		return exitFailed
	case isInternal(err) || isFailedCheck(err) || isRunFailure(err) || isWriteFailure(err):
		fmt.Fprintf(stderr, "ppc %s: %v\n", c.name, err)
		return exitFailed
	default:
		fmt.Fprintf(stderr, "ppc %s: %v\n", c.name, err)
		return exitInput
	}
}

// isRunFailure reports a step that failed while running a valid plan (a hang, a kernel error).
func isRunFailure(err error) bool {
	var re *runtime.RunError
	var remote *dist.RemoteError
	return errors.As(err, &re) || errors.As(err, &remote)
}

// isWriteFailure reports an output that could be created but not written: a full disk or
// quota (wherever it strikes, creating a file included), an I/O error, or a failed write,
// sync or close of an open file. Failing to create an output (a path through a file, a
// missing directory, no permission) stays bad input: the user chose the path.
func isWriteFailure(err error) bool {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.EIO) || errors.Is(err, syscall.EFBIG) {
		return true
	}
	var pe *os.PathError
	return errors.As(err, &pe) && (pe.Op == "write" || pe.Op == "sync" || pe.Op == "close")
}

// parseArgs sets the flags in args on fs and returns the positional arguments. Flags may
// follow positional arguments (`ppc opt model.ir --passes=cse`), which Go's flag package
// alone does not allow; "--" ends the flags. Errors name the flag as the user spells it
// and say what value it wants, rather than the flag package's "parse error".
func parseArgs(fs *flag.FlagSet, args []string) (positional []string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(positional, args[i+1:]...), nil
		}
		if len(a) < 2 || a[0] != '-' {
			positional = append(positional, a)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name == "h" || name == "help" {
			return nil, flag.ErrHelp
		}
		f := fs.Lookup(name)
		if f == nil {
			return nil, usagef("unknown flag %s", flagName(name))
		}
		if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() && !hasValue {
			value = "true"
		} else if !hasValue {
			if i+1 >= len(args) {
				return nil, usagef("flag %s needs a value", flagName(name))
			}
			i++
			value = args[i]
		}
		if err := fs.Set(name, value); err != nil {
			return nil, usagef("%s %q: %s", flagName(name), value, flagValueError(f, err))
		}
	}
	return positional, nil
}

// flagName spells a flag as the help text does: -o, --pp.
func flagName(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// flagValueError says what a flag wants when its value does not parse.
func flagValueError(f *flag.Flag, err error) string {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return err.Error()
	}
	outOfRange := strings.Contains(err.Error(), "out of range")
	switch g.Get().(type) {
	case int, int64:
		if outOfRange {
			return "integer out of range"
		}
		return "want an integer"
	case uint, uint64:
		if outOfRange {
			return "integer out of range"
		}
		return "want a non-negative integer"
	case float64:
		return "want a number"
	case bool:
		return "want true or false"
	}
	return err.Error()
}

// setFlags returns the names of the flags given on the command line (not left at their
// defaults), for checks of flags that only apply together.
func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

func printHelp(w io.Writer) {
	fmt.Fprint(w, `ppc compiles neural-network training (ONNX models or ppc's model DSL) into one program per
rank of a pipeline/tensor/data-parallel mesh, lets you inspect every step, and runs the result.

Usage: ppc <command> [arguments] [flags]

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "\nRun 'ppc <command> --help' for a command's flags.\n")
}

func printCommandHelp(c *command, w io.Writer) {
	fmt.Fprintf(w, "usage: %s\n\n%s\n", strings.TrimSpace("ppc "+c.name+" "+c.args), c.summary)
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	c.setup(fs, &env{})
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		return
	}
	fmt.Fprint(w, "\nFlags:\n")
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		arg := flagName(f.Name)
		if name != "" {
			arg += " " + name
		}
		fmt.Fprintf(w, "  %s\n      %s", arg, usage)
		// A usage that explains its default value ("(0: the schedule's default)") is not
		// followed by a redundant "(default 0)".
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "[]" && !strings.Contains(usage, "("+f.DefValue+":") {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}

// listFlag collects a repeatable flag (`--dim a=1 --dim b=2`); commas also separate values.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*l = append(*l, v)
		}
	}
	return nil
}

// readInput reads a named file, or standard input for "-".
func readInput(e *env, path string) (string, error) {
	if path == "-" {
		b, err := io.ReadAll(e.stdin)
		return string(b), err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", trimPathError(err)
	}
	return string(b), nil
}

// trimPathError drops the operation from an *os.PathError ("open x: no such file" becomes
// "x: no such file") and keeps it in the chain, so that report still sees a failed write.
func trimPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pathError{pe}
	}
	return err
}

type pathError struct{ *os.PathError }

func (e pathError) Error() string { return e.Path + ": " + e.Err.Error() }
func (e pathError) Unwrap() error { return e.PathError }
