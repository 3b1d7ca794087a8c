package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// TestRunSecondSIGINTStuckProcess: a run stuck in a write (its trace goes to a FIFO that
// nobody reads, and that is full) and started with SIGINT ignored, as a shell script's
// background job is, stops at the second SIGINT with status 130. It used to ignore the second
// (signal.Stop put the inherited disposition back) and hang.
func TestRunSecondSIGINTStuckProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the ppc binary")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool to build ppc with")
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "ppc")
	if b, err := exec.Command(goTool, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	// A step of this GPT traces more than a pipe holds.
	plan := compilePlanIn(t, dir, "plan", gpt, "--preset", "tiny", "--microbatches", "2")
	fifo := filepath.Join(dir, "trace.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("no FIFO:", err)
	}
	// Opened for reading, never read: the run's open succeeds and its writes fill the pipe.
	rd, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	cmd := exec.Command(sh, "-c", `trap "" INT; exec "$0" "$@"`, bin, "run", plan, "--steps", "1000", "--trace", fifo)
	var errb, outb syncBuffer
	cmd.Stderr, cmd.Stdout = &errb, &outb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(2*time.Minute, func() { cmd.Process.Kill() })
	defer timer.Stop()
	// Once step 1's events reach the pipe the run is inside step 1, which it can never finish
	// (a step traces more than the pipe holds). The trace's header is a few hundred bytes and
	// step events come in 64 KiB flushes, so 4 KiB in the pipe means step 1 has begun. Waiting
	// only for the first bytes raced: a SIGINT between the header and step 1 ends the run
	// cleanly before the first step, and the second SIGINT is never needed.
	begun := false
	for end := time.Now().Add(time.Minute); time.Now().Before(end) && !begun; time.Sleep(time.Millisecond) {
		var n int32
		if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, rd.Fd(), syscall.TIOCINQ, uintptr(unsafe.Pointer(&n))); errno != 0 {
			t.Fatal("FIONREAD:", errno)
		}
		begun = n >= 4096
	}
	if !begun {
		t.Fatalf("step 1's trace never reached the pipe\n%s", errb.String())
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	waitUntil(&errb, "ppc run: SIGINT: finishing the step in progress")
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitInterrupted || !strings.Contains(errb.String(), "ppc run: SIGINT again: stopping at once") {
		t.Fatalf("ppc exited with %v (want status %d)\n%s", err, exitInterrupted, errb.String())
	}
	if strings.Contains(outb.String(), "step 1 ") {
		t.Fatalf("step 1 ended: the run was not stuck in it\n%s", outb.String())
	}
}
