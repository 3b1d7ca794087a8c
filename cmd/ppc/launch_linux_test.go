package main

import (
	"bufio"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// A launcher killed with SIGKILL (no chance to stop its workers) takes its workers with it:
// the kernel kills them (Pdeathsig), so none is left running without supervision.
func TestNprocWorkersDieWithLauncher(t *testing.T) {
	plan := fakePlan(t, 2)
	cmd := exec.Command(os.Args[0]) // TestMain runs `ppc run PLAN --nproc 2`
	cmd.Env = append(os.Environ(), fakeLauncherVar+"="+plan, fakeWorkerVar+"=stubborn")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(time.Minute, func() { cmd.Process.Kill() })
	defer timer.Stop()
	pidRe := regexp.MustCompile(`launch ppc rank=\d .* pid=(\d+) `)
	var pids []string
	ready := 0
	sc := bufio.NewScanner(stdout)
	for ready < 2 && sc.Scan() {
		if m := pidRe.FindStringSubmatch(sc.Text()); m != nil {
			pids = append(pids, m[1])
		}
		if strings.HasSuffix(sc.Text(), "ready") {
			ready++
		}
	}
	if ready < 2 || len(pids) != 2 {
		t.Fatalf("%d workers ready, pids %v", ready, pids)
	}
	cmd.Process.Kill()
	cmd.Wait()
	for _, pid := range pids {
		for deadline := time.Now().Add(10 * time.Second); alive(pid); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("worker %s still runs 10 s after its launcher was killed", pid)
			}
		}
	}
}

// alive reports whether process pid runs (a zombie, dead but not reaped, does not).
func alive(pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state …: the state follows the last ')'.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(fields) > 0 && fields[0] != "Z" && fields[0] != "X"
}
