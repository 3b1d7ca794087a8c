package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/protobuf/proto"

	"ppc.dev/ppc/codegen"
	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/runtime"
	"ppc.dev/ppc/runtime/dist"
	"ppc.dev/ppc/runtime/fault"
)

// The exit-status policy of main.go, error type by error type.
func TestReportPolicy(t *testing.T) {
	c := &command{name: "x"}
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"usage", usagef("bad flag"), exitInput},
		{"plain error (bad input)", errors.New("model.ir:1:1: bad"), exitInput},
		{"runtime input error", &fault.InputError{Err: errors.New("bad data")}, exitInput},
		{"failed check", checkFailed{errors.New("differs")}, exitFailed},
		{"hang", &runtime.RunError{Step: 3, Err: &dist.HangError{Waiting: map[int]string{0: "recv"}}}, exitFailed},
		{"cannot create an output", trimPathError(&os.PathError{Op: "open", Path: "f/x", Err: syscall.ENOTDIR}), exitInput},
		{"no permission to create an output", &os.PathError{Op: "open", Path: "x", Err: syscall.EACCES}, exitInput},
		{"write after creation", trimPathError(&os.PathError{Op: "write", Path: "x", Err: syscall.EBADF}), exitFailed},
		{"full disk while creating", &os.PathError{Op: "open", Path: "x", Err: syscall.ENOSPC}, exitFailed},
		{"quota, wrapped", errors.Join(errors.New("--save"), &os.PathError{Op: "write", Path: "x", Err: syscall.EDQUOT}), exitFailed},
	} {
		if got := report(c, tc.err, io.Discard); got != tc.want {
			t.Errorf("%s: exit %d, want %d", tc.name, got, tc.want)
		}
	}
}

// A plan whose ranks wait for each other forever is a runtime failure (exit 1), reported
// with who waits for what, not bad input.
func TestRunHangExits1(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "plan")
	if code, _, errOut := ppc(t, "", "compile", mlp, "--pp", "2", "--microbatches", "2", "-o", dir); code != 0 {
		t.Fatal(errOut)
	}
	// Rank 0 no longer sends its activations: rank 1 waits for them, rank 0 for the
	// gradients rank 1 never computes. The program still validates; plan.json gets its new
	// checksum, as if a buggy compiler had written it.
	path := filepath.Join(dir, codegen.ProgramFile(0))
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	prog := &pb.Program{}
	if err := proto.Unmarshal(data, prog); err != nil {
		t.Fatal(err)
	}
	var kept []*pb.Instr
	for _, in := range prog.Instrs {
		if in.Kind != pb.Instr_SEND {
			kept = append(kept, in)
		}
	}
	if len(kept) == len(prog.Instrs) {
		t.Fatal("rank 0 sends nothing")
	}
	prog.Instrs = kept
	data, _ = proto.MarshalOptions{Deterministic: true}.Marshal(prog)
	os.WriteFile(path, data, 0o644)
	plan, err := codegen.ReadPlan(dir)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	plan.Programs[0].ProgramSHA256 = hex.EncodeToString(sum[:])
	if err := codegen.WritePlan(dir, plan); err != nil {
		t.Fatal(err)
	}
	runCases(t, []cliCase{{[]string{"run", dir, "--steps", "1"}, exitFailed,
		[]string{"ppc run: step 1: hang: every running rank is blocked", "rank 1 waits for recv from rank 0"}, nil}})
}

// A full disk (/dev/full: every write fails with ENOSPC) is a failure to write an output,
// exit 1; a path that cannot be created is the user's to fix, exit 2.
func TestWriteFailuresExit1(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full on this system")
	}
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan")
	if code, _, errOut := ppc(t, "", "compile", mlp, "-o", plan); code != 0 {
		t.Fatal(errOut)
	}
	file := writeFile(t, "file", "x")
	runCases(t, []cliCase{
		{[]string{"run", plan, "--steps", "2", "--log-json", "/dev/full"}, exitFailed, []string{"--log-json: /dev/full: no space left on device"}, nil},
		{[]string{"run", plan, "--steps", "1", "--trace", "/dev/full"}, exitFailed, []string{"--trace: /dev/full: no space left on device"}, nil},
		{[]string{"simulate", plan, "--svg", "/dev/full"}, exitFailed, []string{"--svg: /dev/full: no space left on device"}, nil},
		{[]string{"simulate", plan, "--trace", "/dev/full"}, exitFailed, []string{"--trace: /dev/full: no space left on device"}, nil},
		{[]string{"simulate", plan, "--svg", filepath.Join(file, "t.svg")}, exitInput, []string{"--svg: " + filepath.Join(file, "t.svg") + ": not a directory"}, nil},
		{[]string{"run", plan, "--steps", "1", "--trace", filepath.Join(file, "t.json")}, exitInput, []string{"--trace: "}, nil},
	})
	// Standard output on a full disk: `ppc import model > model.ir`.
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer full.Close()
	var errb bytes.Buffer
	code := run([]string{"import", mlp}, &env{stdin: strings.NewReader(""), stdout: full, stderr: &errb})
	if code != exitFailed || !strings.Contains(errb.String(), "no space left on device") {
		t.Errorf("import > /dev/full: exit %d\n%s", code, errb.String())
	}
}
