package main

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"ppc.dev/ppc/codegen"
)

// This file is the launcher side of multi-process runs: which rank a `ppc run` process is
// when torchrun, Slurm, mpirun or `ppc run --nproc` started it (detectLaunch), and the
// supervisor of `ppc run --nproc N` (superviseWorkers). The rendezvous and transport that
// the ranks then use live in package runtime.

// launchInfo is what the launcher that started this process says about its place in the run.
type launchInfo struct {
	// Launcher is "torchrun", "slurm", "mpi" (Open MPI, MPICH, Intel MPI) or "ppc" (a worker
	// of `ppc run --nproc`).
	Launcher    string
	Rank, World int
	// LocalRank and LocalWorld place the process among those of its machine (which device
	// it drives): LocalRank -1 and LocalWorld 0 when the launcher does not say.
	LocalRank, LocalWorld int
	// MasterAddr:MasterPort is where rank 0 serves the run's store.
	MasterAddr string
	MasterPort int
	// Token is what every process of the run presents to the store (see runToken).
	Token string
	// RunID is the launcher's name for the job ("" when it has none).
	RunID string
	// StoreFD is the listening socket rank 0 serves the store on, inherited from
	// `ppc run --nproc` (no port to race for); -1 unless set.
	StoreFD int
	// ReportFD is the pipe on which a worker of `ppc run --nproc` reports, as it fails,
	// whose failure stopped it (failureReport); 0 (standard input, never the pipe) unless set.
	ReportFD int
}

// The environment of a worker of `ppc run --nproc`: torchrun's names plus these.
const (
	envLauncher = "PPC_LAUNCHER" // "ppc"
	envToken    = "PPC_RUN_TOKEN"
	envStoreFD  = "PPC_STORE_FD"
	envReportFD = "PPC_REPORT_FD"
	envRunID    = "PPC_RUN_ID"
)

// defaultMasterPort is torchrun's, for the launchers that give no port.
const defaultMasterPort = 29500

// detectLaunch reads the launcher's variables from getenv; nil, nil when no launcher
// started this process (a plain `ppc run`, every rank in this process). Errors are usage
// errors naming the variable and its value.
//
// Precedence, first match wins:
//
//  1. PPC_LAUNCHER=ppc: a worker of `ppc run --nproc`, which sets torchrun's names and may
//     run inside any of the launchers below (their variables are then the launcher's own).
//  2. torchrun (RANK, WORLD_SIZE): torchrun inside an sbatch job or under srun inherits the
//     Slurm task's variables, which describe the torchrun agent, not its workers.
//  3. Open MPI (OMPI_COMM_WORLD_RANK): mpirun inside a Slurm allocation starts its daemons
//     with srun, so its ranks inherit a daemon's SLURM_PROCID (a node index).
//  4. MPICH / Intel MPI (PMI_RANK), unless the Slurm variables of an srun step say the same
//     rank and size: then srun started the process itself (srun --mpi=pmi2), and Slurm's
//     variables also give the rendezvous address. When they differ, an mpiexec inside the
//     allocation started it, as for Open MPI.
//  5. Slurm (SLURM_PROCID in a step of more than one task). The batch script and the shell
//     of salloc or `srun --pty bash` carry SLURM_PROCID too, but they are one task (or no
//     step at all): `ppc run` there runs every rank in its own process, as it does outside
//     Slurm.
func detectLaunch(getenv func(string) string) (*launchInfo, error) {
	r := envReader{getenv}
	switch l := getenv(envLauncher); l {
	case "":
	case "ppc":
		return ppcLaunch(r)
	default:
		return nil, usagef("%s=%q: the only launcher that sets it is ppc run --nproc (PPC_LAUNCHER=ppc); unset it", envLauncher, l)
	}
	if r.set("RANK") || r.set("WORLD_SIZE") {
		return torchrunLaunch(r)
	}
	if r.set("OMPI_COMM_WORLD_RANK") || r.set("OMPI_COMM_WORLD_SIZE") {
		return mpiLaunch(r, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
			[]string{"OMPI_COMM_WORLD_LOCAL_RANK"}, []string{"OMPI_COMM_WORLD_LOCAL_SIZE"},
			[]string{"OMPI_MCA_orte_ess_jobid", "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"},
			"mpirun -np 4 -x MASTER_ADDR ppc run DIR")
	}
	slurm := r.set("SLURM_PROCID") && slurmStep(r)
	if r.set("PMI_RANK") || r.set("PMI_SIZE") {
		if !slurm || getenv("PMI_RANK") != getenv("SLURM_PROCID") || getenv("PMI_SIZE") != slurmTasks(r) {
			return mpiLaunch(r, "PMI_RANK", "PMI_SIZE",
				[]string{"MPI_LOCALRANKID", "PMI_LOCAL_RANK"}, []string{"MPI_LOCALNRANKS", "PMI_LOCAL_SIZE"},
				[]string{"PMI_JOBID", "PMIX_NAMESPACE"},
				"mpiexec -n 4 -genv MASTER_ADDR $MASTER_ADDR ppc run DIR")
		}
	}
	if slurm {
		return slurmLaunch(r)
	}
	return nil, nil
}

// envReader reads launcher variables; an empty variable counts as unset.
type envReader struct{ getenv func(string) string }

func (r envReader) set(name string) bool { return r.getenv(name) != "" }

// first returns the first of names that is set, and its value.
func (r envReader) first(names ...string) (name, value string) {
	for _, n := range names {
		if v := r.getenv(n); v != "" {
			return n, v
		}
	}
	return "", ""
}

// count reads a non-negative integer (a rank, a size); -1 when unset.
func (r envReader) count(name string) (int, error) {
	v := r.getenv(name)
	if v == "" {
		return -1, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, usagef("%s=%q: want a non-negative integer", name, v)
	}
	if n > 1<<24 {
		return 0, usagef("%s=%q: larger than any run", name, v)
	}
	return n, nil
}

// need reads a variable that must be set once its launcher is detected; trigger names the
// variable that identified the launcher.
func (r envReader) need(name, trigger string) (int, error) {
	n, err := r.count(name)
	if err == nil && n < 0 {
		err = usagef("%s=%s is set but %s is not: set both, or neither to run every rank in this process", trigger, r.getenv(trigger), name)
	}
	return n, err
}

// rankAndWorld reads a rank and a world size and checks that the rank is in the world.
func (r envReader) rankAndWorld(rankVar, worldVar string) (rank, world int, err error) {
	trigger := rankVar
	if !r.set(rankVar) {
		trigger = worldVar
	}
	if rank, err = r.need(rankVar, trigger); err != nil {
		return
	}
	if world, err = r.need(worldVar, trigger); err != nil {
		return
	}
	if world == 0 {
		return 0, 0, usagef("%s=0: a run needs at least one process", worldVar)
	}
	if rank >= world {
		return 0, 0, usagef("%s=%d is not below %s=%d", rankVar, rank, worldVar, world)
	}
	return rank, world, nil
}

// local reads a local rank and size from the first of each list that is set; -1 and 0 when
// the launcher does not give them.
func (r envReader) local(rankVars, sizeVars []string) (rank, size int, err error) {
	rankVar, _ := r.first(rankVars...)
	sizeVar, _ := r.first(sizeVars...)
	rank, size = -1, 0
	if rankVar != "" {
		if rank, err = r.count(rankVar); err != nil {
			return
		}
	}
	if sizeVar != "" {
		if size, err = r.count(sizeVar); err != nil {
			return
		}
		if size == 0 {
			return 0, 0, usagef("%s=0: a machine of the run has at least one process", sizeVar)
		}
	}
	if rank >= 0 && size > 0 && rank >= size {
		return 0, 0, usagef("%s=%d is not below %s=%d", rankVar, rank, sizeVar, size)
	}
	return rank, size, nil
}

// masterAddr reads MASTER_ADDR; missing is the error when it is unset.
func (r envReader) masterAddr(missing string) (string, error) {
	addr := r.getenv("MASTER_ADDR")
	if addr == "" {
		return "", usagef("%s", missing)
	}
	if strings.ContainsAny(addr, " \t\n/") {
		return "", usagef("MASTER_ADDR=%q: want the host name or IP address of rank 0", addr)
	}
	return addr, nil
}

// masterPort reads MASTER_PORT, or returns def when it is unset (def 0: MASTER_PORT is
// required).
func (r envReader) masterPort(def int) (int, error) {
	v := r.getenv("MASTER_PORT")
	if v == "" {
		if def == 0 {
			return 0, usagef("MASTER_ADDR=%s is set but MASTER_PORT is not: export MASTER_PORT=29500 (a free port on the host of rank 0, the same for every process)", r.getenv("MASTER_ADDR"))
		}
		return def, nil
	}
	p, err := strconv.Atoi(v)
	if err != nil || p < 1 || p > 65535 {
		return 0, usagef("MASTER_PORT=%q: want a TCP port, 1 to 65535", v)
	}
	return p, nil
}

func ppcLaunch(r envReader) (*launchInfo, error) {
	li, err := torchrunLaunch(r)
	if err != nil {
		return nil, err
	}
	li.Launcher, li.RunID = "ppc", r.getenv(envRunID)
	if !r.set(envToken) {
		return nil, usagef("%s=ppc is set but %s is not: only ppc run --nproc sets %s, and it sets both", envLauncher, envToken, envLauncher)
	}
	if v := r.getenv(envStoreFD); v != "" {
		fd, err := strconv.Atoi(v)
		if err != nil || fd < 3 {
			return nil, usagef("%s=%q: want a file descriptor number, 3 or more", envStoreFD, v)
		}
		if li.Rank != 0 {
			return nil, usagef("%s=%s is set for RANK=%d: only rank 0 serves the store", envStoreFD, v, li.Rank)
		}
		li.StoreFD = fd
	}
	if v := r.getenv(envReportFD); v != "" {
		fd, err := strconv.Atoi(v)
		if err != nil || fd < 3 || fd == li.StoreFD {
			return nil, usagef("%s=%q: want a file descriptor number, 3 or more, not %s's", envReportFD, v, envStoreFD)
		}
		li.ReportFD = fd
	}
	return li, nil
}

func torchrunLaunch(r envReader) (*launchInfo, error) {
	rank, world, err := r.rankAndWorld("RANK", "WORLD_SIZE")
	if err != nil {
		return nil, err
	}
	lr, lw, err := r.local([]string{"LOCAL_RANK"}, []string{"LOCAL_WORLD_SIZE"})
	if err != nil {
		return nil, err
	}
	addr, err := r.masterAddr(fmt.Sprintf("RANK=%d and WORLD_SIZE=%d are set but MASTER_ADDR is not: export MASTER_ADDR=<host of rank 0> MASTER_PORT=29500 for every process (torchrun sets them)", rank, world))
	if err != nil {
		return nil, err
	}
	port, err := r.masterPort(0)
	if err != nil {
		return nil, err
	}
	runID := r.getenv("TORCHELASTIC_RUN_ID")
	return &launchInfo{Launcher: "torchrun", Rank: rank, World: world, LocalRank: lr, LocalWorld: lw,
		MasterAddr: addr, MasterPort: port, RunID: runID, StoreFD: -1,
		Token: runToken(r, "torchrun", runID, addr, port, world)}, nil
}

// mpiLaunch reads the variables of an MPI launcher: the rank and size variables, the
// local rank and size (the first of each list that is set), and the job id (likewise).
// example is an mpirun command line passing MASTER_ADDR on, for the error when it is unset.
func mpiLaunch(r envReader, rankVar, sizeVar string, localRank, localSize, jobVars []string, example string) (*launchInfo, error) {
	rank, world, err := r.rankAndWorld(rankVar, sizeVar)
	if err != nil {
		return nil, err
	}
	lr, lw, err := r.local(localRank, localSize)
	if err != nil {
		return nil, err
	}
	addr, err := r.masterAddr(fmt.Sprintf(
		"started by MPI as %s=%d of %s=%d, which gives no rendezvous address: run `export MASTER_ADDR=$(hostname)` on the host of rank 0 before starting, and pass it on to every rank (%s); MASTER_PORT defaults to %d",
		rankVar, rank, sizeVar, world, example, defaultMasterPort))
	if err != nil {
		return nil, err
	}
	port, err := r.masterPort(defaultMasterPort)
	if err != nil {
		return nil, err
	}
	_, job := r.first(jobVars...)
	return &launchInfo{Launcher: "mpi", Rank: rank, World: world, LocalRank: lr, LocalWorld: lw,
		MasterAddr: addr, MasterPort: port, RunID: job, StoreFD: -1,
		Token: runToken(r, "mpi", job, addr, port, world)}, nil
}

// slurmStep reports whether this process is a task of an srun step, not the batch script or
// an allocation's shell: a step id that is a number below Slurm's special steps (batch,
// extern, interactive: 0xfffffff0 and up).
func slurmStep(r envReader) bool {
	_, v := r.first("SLURM_STEP_ID", "SLURM_STEPID")
	id, err := strconv.ParseUint(v, 10, 32)
	return err == nil && id < 0xfffffff0
}

// slurmTasks is the number of tasks of the step.
func slurmTasks(r envReader) string {
	_, v := r.first("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS")
	return v
}

func slurmLaunch(r envReader) (*launchInfo, error) {
	tasksVar, _ := r.first("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS")
	if tasksVar == "" {
		tasksVar = "SLURM_NTASKS"
	}
	rank, world, err := r.rankAndWorld("SLURM_PROCID", tasksVar)
	if err != nil {
		return nil, err
	}
	if world == 1 {
		return nil, nil // one task: nothing to launch (see detectLaunch)
	}
	lr, err := r.count("SLURM_LOCALID")
	if err != nil {
		return nil, err
	}
	lw, err := slurmLocalWorld(r)
	if err != nil {
		return nil, err
	}
	if lr >= 0 && lw > 0 && lr >= lw {
		lw = 0 // a task layout this parser does not know: unknown rather than wrong
	}
	job := r.getenv("SLURM_JOB_ID")
	_, step := r.first("SLURM_STEP_ID", "SLURM_STEPID")
	addr := ""
	if r.set("MASTER_ADDR") {
		if addr, err = r.masterAddr(""); err != nil {
			return nil, err
		}
	} else {
		// Task 0 runs on the first node of the step (block and cyclic distributions).
		listVar, list := r.first("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
		if listVar == "" {
			return nil, usagef("started by srun as SLURM_PROCID=%d of %d, but neither MASTER_ADDR nor SLURM_JOB_NODELIST is set: export MASTER_ADDR=<host of task 0>", rank, world)
		}
		if addr, err = firstHost(list); err != nil {
			return nil, usagef("%s=%q: %v; export MASTER_ADDR=<host of task 0> to bypass it", listVar, list, err)
		}
	}
	// Without MASTER_PORT, every task computes the same port from the job id without
	// talking to the others, and two jobs sharing a node get different ports unless their
	// ids are 20000 apart. The range, 10000 to 29999, is below Linux's ephemeral ports
	// (32768 and up), so no process's outgoing connection holds the port.
	port := 0
	if !r.set("MASTER_PORT") {
		id, err := strconv.ParseUint(job, 10, 64)
		if err != nil {
			return nil, usagef("SLURM_JOB_ID=%q gives no default rendezvous port: export MASTER_PORT=29500 (a free port on the host of task 0)", job)
		}
		port = 10000 + int(id%20000)
	}
	if port, err = r.masterPort(port); err != nil {
		return nil, err
	}
	return &launchInfo{Launcher: "slurm", Rank: rank, World: world, LocalRank: lr, LocalWorld: lw,
		MasterAddr: addr, MasterPort: port, RunID: job, StoreFD: -1,
		Token: runToken(r, "slurm", job+"."+step, addr, port, world)}, nil
}

// slurmLocalWorld is the number of tasks of the step on this node: from the step's tasks
// per node ("4(x2),3": four on each of the first two nodes, three on the third) at this
// node's index (SLURM_NODEID; the first node's count without it), or SLURM_NTASKS_PER_NODE;
// 0 when neither is set.
func slurmLocalWorld(r envReader) (int, error) {
	if listVar, list := r.first("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"); listVar != "" {
		node, err := r.count("SLURM_NODEID")
		if err != nil {
			return 0, err
		}
		counts, err := parseTasksPerNode(list)
		if err != nil {
			return 0, usagef("%s=%q: %v", listVar, list, err)
		}
		if node < 0 {
			node = 0
		}
		if node >= len(counts) {
			return 0, nil
		}
		return counts[node], nil
	}
	n, err := r.count("SLURM_NTASKS_PER_NODE")
	return max(n, 0), err
}

// parseTasksPerNode expands Slurm's tasks per node, "4(x2),3" → [4 4 3].
func parseTasksPerNode(s string) ([]int, error) {
	var counts []int
	for _, item := range strings.Split(s, ",") {
		n, reps := item, "1"
		if i := strings.IndexByte(item, '('); i >= 0 {
			if !strings.HasPrefix(item[i:], "(x") || !strings.HasSuffix(item, ")") {
				return nil, fmt.Errorf("%q is not COUNT or COUNT(xREPEAT)", item)
			}
			n, reps = item[:i], item[i+2:len(item)-1]
		}
		c, err1 := strconv.Atoi(n)
		k, err2 := strconv.Atoi(reps)
		if err1 != nil || err2 != nil || c < 1 || k < 1 || len(counts)+k > 1<<20 {
			return nil, fmt.Errorf("%q is not COUNT or COUNT(xREPEAT)", item)
		}
		for ; k > 0; k-- {
			counts = append(counts, c)
		}
	}
	return counts, nil
}

// firstHost returns the first host of a Slurm host list, whose compressed form gives ranges
// in brackets: "node[01-04,07],gpu5" is node01 … node04, node07, gpu5; "a[1-2]b[3-4]" is
// a1b3, a1b4, a2b3, a2b4. Ranges keep their zero padding. The whole list is checked, so that
// a malformed list is an error rather than a guess.
func firstHost(list string) (string, error) {
	var entries []string // split at the commas outside brackets
	open, start := -1, 0
	for i := 0; i < len(list); i++ {
		switch list[i] {
		case '[':
			if open >= 0 {
				return "", fmt.Errorf("[ inside [ at offset %d", i)
			}
			open = i
		case ']':
			if open < 0 {
				return "", fmt.Errorf("] without [ at offset %d", i)
			}
			open = -1
		case ',':
			if open < 0 {
				entries = append(entries, list[start:i])
				start = i + 1
			}
		}
	}
	if open >= 0 {
		return "", fmt.Errorf("[ at offset %d is not closed", open)
	}
	entries = append(entries, list[start:])
	var first string
	for i, e := range entries {
		h, err := firstOf(e)
		if err != nil {
			return "", err
		}
		if i == 0 {
			first = h
		}
	}
	return first, nil
}

// firstOf returns the first host an entry of a host list ("a[1-2]b") names.
func firstOf(entry string) (string, error) {
	if entry == "" {
		return "", errors.New("empty host name")
	}
	var b strings.Builder
	for rest := entry; rest != ""; {
		text, ranges, hasRanges := strings.Cut(rest, "[")
		for _, c := range []byte(text) {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
				return "", fmt.Errorf("character %q in host name %q", c, entry)
			}
		}
		b.WriteString(text)
		if !hasRanges {
			break
		}
		ranges, rest, _ = strings.Cut(ranges, "]") // firstHost checked the brackets
		lo, err := checkRanges(ranges)
		if err != nil {
			return "", err
		}
		b.WriteString(lo)
	}
	return b.String(), nil
}

// checkRanges checks the inside of a host list's brackets ("01-04,07") and returns its first
// number as written ("01").
func checkRanges(s string) (string, error) {
	if s == "" {
		return "", errors.New("empty []")
	}
	var firstNum string
	for _, r := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		if !isRange {
			hi = lo
		}
		a, err1 := strconv.ParseUint(lo, 10, 32)
		b, err2 := strconv.ParseUint(hi, 10, 32)
		if err1 != nil || err2 != nil {
			return "", fmt.Errorf("[%s]: %q is not N or N-M", s, r)
		}
		if a > b {
			return "", fmt.Errorf("[%s]: range %s runs backwards", s, r)
		}
		if firstNum == "" {
			firstNum = lo
		}
	}
	return firstNum, nil
}

// runToken is the secret every process of a run presents to the store: PPC_RUN_TOKEN when
// set, else a hash of the launcher's identity of the job, the rendezvous address and the
// world size. A derived token only keeps out stale workers of other runs (a crashed job's
// leftovers on the same port); anyone who can read the job's environment, or guess it, can
// compute it. For security against other users of the machines, set PPC_RUN_TOKEN to a
// secret of your own (`export PPC_RUN_TOKEN=$(openssl rand -hex 32)`) for every process.
func runToken(r envReader, launcher, job, addr string, port, world int) string {
	if t := r.getenv(envToken); t != "" {
		return t
	}
	h := sha256.New()
	for _, s := range []string{"ppc run token 1", launcher, job, net.JoinHostPort(addr, strconv.Itoa(port)), strconv.Itoa(world)} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Supervision of `ppc run --nproc N`.

// workerExecutable is the program the supervisor starts as each worker: ppc itself (in
// tests, the test binary, which acts as a fake worker).
var workerExecutable = os.Executable

// workerGrace is how long the supervisor waits, once a worker failed, for the others to stop
// on their own (their transport notices a dead peer within 60 s) before it kills them. A
// worker that the others report as not responding is killed at once (failureReport).
var workerGrace = 90 * time.Second

// workerArgs spells the flags given to `ppc run` (but --nproc) for its workers, after the
// plan directory.
func workerArgs(fs *flag.FlagSet, dir string) []string {
	args := []string{dir}
	fs.Visit(func(f *flag.Flag) {
		if f.Name != "nproc" {
			args = append(args, "--"+f.Name+"="+f.Value.String())
		}
	})
	return args
}

// worker is one process started by superviseWorkers.
type worker struct {
	rank           int
	cmd            *exec.Cmd
	stdout, stderr *lineWriter // nil when rank 0's stdout is the launcher's own file
	// killed: by the supervisor (after the grace period, at a second interrupt, or when the
	// others found it not responding).
	killed bool
	// report is the read end of the worker's failure-report pipe; reported is what it
	// said once it exited (Cause -1: nothing).
	report   *os.File
	reported failureReport
	// state: once it exited (the supervising loop's to read and write)
	state *os.ProcessState
}

// readReport reads the failure report of a worker that exited: the pipe's writer is gone,
// so the read ends at once (unless the worker left a child holding the pipe: then after a
// moment, without a report).
func (w *worker) readReport() {
	w.reported = failureReport{Cause: -1}
	if w.report == nil {
		return
	}
	defer w.report.Close()
	w.report.SetReadDeadline(time.Now().Add(2 * time.Second))
	b, _ := io.ReadAll(io.LimitReader(w.report, 4096))
	var r failureReport
	if json.Unmarshal(b, &r) == nil && r.Cause >= 0 {
		w.reported = r
	}
}

func (w *worker) String() string { return fmt.Sprintf("rank %d (pid %d)", w.rank, w.cmd.Process.Pid) }

// superviseWorkers runs `ppc run DIR --nproc n`: n worker processes of this program
// (`ppc run` workerArgs..., workerArgs[0] the plan directory) on this machine, one per rank,
// started the way torchrun starts them, with rank 0's store on a loopback socket handed to it
// open. It forwards an interrupt to them, kills them when one failed and the others do not
// stop, and exits as they did.
func superviseWorkers(e *env, n int, workerArgs []string) error {
	if n < 0 {
		return usagef("--nproc must be positive, got %d", n)
	}
	if len(workerArgs) == 0 {
		return usagef("want one plan directory, got 0 arguments")
	}
	p, err := codegen.ReadPlan(workerArgs[0])
	if err != nil {
		return err
	}
	if n != p.World {
		return usagef("--nproc %d: the plan %s has %d ranks (pp %d × dp %d × cp %d × tp %d); use --nproc %d, or recompile for %d ranks",
			n, workerArgs[0], p.World, p.Mesh.PP, p.Mesh.DP, p.Mesh.CP, p.Mesh.TP, p.World, n)
	}
	// A launcher started this process as one of several: each would start its own n
	// workers, several runs of the whole plan side by side.
	if li, err := detectLaunch(os.Getenv); err == nil && li != nil && li.World > 1 {
		return usagef("--nproc starts every rank on this machine, but %s started this process as rank %d of %d; let %s start one ppc run per rank, without --nproc",
			li.Launcher, li.Rank, li.World, li.Launcher)
	}
	exe, err := workerExecutable()
	if err != nil {
		return checkFailed{fmt.Errorf("--nproc: cannot find ppc's own executable to start the workers: %w", err)}
	}

	// Rank 0 serves the store on a socket this process opens and hands it open: a port
	// chosen by rank 0 would have to be told to the others, and a port chosen here and
	// closed could be taken before rank 0 listens on it. Loopback only: the run is local.
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return checkFailed{fmt.Errorf("--nproc: cannot listen on the loopback interface for rank 0's store: %w", err)}
	}
	defer ln.Close()
	lnFile, err := ln.(*net.TCPListener).File()
	if err != nil {
		return checkFailed{fmt.Errorf("--nproc: %w", err)}
	}
	defer lnFile.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	token, runID := randomHex(32), randomHex(8)

	base := workerEnviron(os.Environ())
	out := &sync.Mutex{} // one line at a time on the launcher's outputs
	// Pdeathsig (Linux) fires when the thread that started a worker exits, not the process:
	// start and wait for them all on one thread that outlives them.
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()

	workers := make([]*worker, n)
	for rank := range n {
		cmd := exec.Command(exe, append([]string{"run"}, workerArgs...)...)
		cmd.Env = append(slices.Clip(base),
			"RANK="+strconv.Itoa(rank), "WORLD_SIZE="+strconv.Itoa(n),
			"LOCAL_RANK="+strconv.Itoa(rank), "LOCAL_WORLD_SIZE="+strconv.Itoa(n),
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port),
			envToken+"="+token, envRunID+"="+runID, envLauncher+"=ppc")
		cmd.SysProcAttr = workerSysProcAttr()
		// A worker that left a child holding its outputs does not keep the run waiting.
		cmd.WaitDelay = 5 * time.Second
		w := &worker{rank: rank, cmd: cmd}
		prefix := fmt.Sprintf("[rank %d] ", rank)
		if f, ok := e.stdout.(*os.File); ok && rank == 0 {
			cmd.Stdout = f // a terminal stays one: progress bars work
		} else {
			if rank == 0 {
				prefix = ""
			}
			w.stdout = &lineWriter{mu: out, w: e.stdout, prefix: prefix}
			cmd.Stdout = w.stdout
		}
		w.stderr = &lineWriter{mu: out, w: e.stderr, prefix: fmt.Sprintf("[rank %d] ", rank)}
		cmd.Stderr = w.stderr
		if rank == 0 {
			cmd.ExtraFiles = []*os.File{lnFile} // fd 3 in the worker
			cmd.Env = append(cmd.Env, envStoreFD+"=3")
		}
		report, reportW, err := os.Pipe()
		if err == nil {
			cmd.ExtraFiles = append(cmd.ExtraFiles, reportW)
			cmd.Env = append(cmd.Env, fmt.Sprintf("%s=%d", envReportFD, 2+len(cmd.ExtraFiles)))
			w.report = report
		}
		err = cmd.Start()
		if reportW != nil {
			reportW.Close() // the worker holds the writing end: its exit ends the report
		}
		if err != nil {
			for _, s := range workers[:rank] {
				s.cmd.Process.Kill()
				s.cmd.Wait()
			}
			return checkFailed{fmt.Errorf("--nproc: starting rank %d: %w", rank, err)}
		}
		workers[rank] = w
	}
	// Rank 0 holds the listener now; this process's copies would only keep the port open
	// after rank 0 exits.
	lnFile.Close()
	ln.Close()
	startupNote(e, "started %d workers (pids %s)…", n, pids(workers))
	return supervise(e, out, workers)
}

// supervise waits for the workers, forwarding interrupts and killing them when one failed
// and others outlive the grace period; it returns the launcher's outcome.
func supervise(e *env, out *sync.Mutex, workers []*worker) error {
	say := func(format string, args ...any) {
		out.Lock()
		defer out.Unlock()
		fmt.Fprintf(e.stderr, "ppc run: "+format+"\n", args...)
	}
	exited := make(chan *worker)
	for _, w := range workers {
		go func() {
			w.cmd.Wait()
			w.stdout.flush()
			w.stderr.flush()
			w.readReport()
			exited <- w
		}()
	}
	var sigs <-chan os.Signal
	stop := func() {}
	if e.interrupts != nil {
		// Until every worker exited, or a second interrupt killed them: that kill is what
		// the default effect of the signal (this process dying) does only through
		// Pdeathsig, on Linux.
		sigs, stop = e.interrupts()
		defer stop()
	}
	var (
		interrupt os.Signal
		forced    bool // a second interrupt killed the workers
		grace     <-chan time.Time
		failed    *worker   // the first to fail: the rank the workers name, else the first to exit failing
		order     []*worker // as they exited
		running   = len(workers)
	)
	for running > 0 {
		select {
		case w := <-exited:
			running--
			w.state = w.cmd.ProcessState // set here: the loop reads it for the others
			order = append(order, w)
			if w.state.Success() || interrupt != nil {
				continue
			}
			// The workers know whose failure came first (the rendezvous sends every rank
			// the first cause); the order in which their exits reach this loop does not.
			cause := w
			if c := w.reported.Cause; c >= 0 && c < len(workers) && c != w.rank {
				cause = workers[c]
			}
			if failed == nil {
				failed = cause
				if running > 0 {
					if cause == w {
						say("%s %s; waiting up to %s for the other ranks to stop", w, exitDescription(w.state), workerGrace)
					} else {
						what := "failed"
						if w.reported.Unresponsive {
							what = "stopped responding"
						}
						say("%s %s after %s %s; waiting up to %s for the other ranks to stop", w, exitDescription(w.state), cause, what, workerGrace)
					}
					t := time.NewTimer(workerGrace)
					defer t.Stop()
					grace = t.C
				}
			}
			// A rank the others found not responding is stopped or wedged: it would not
			// exit on its own, and waiting out the grace period only delays the end.
			if cause != w && w.reported.Unresponsive && cause.state == nil && !cause.killed {
				say("killing %s: %s found it not responding", cause, w)
				cause.killed = true
				cause.cmd.Process.Kill()
			}
		case <-grace:
			grace = nil
			for _, w := range workers {
				if w.state == nil && !w.killed {
					say("killing %s: still running %s after %s failed", w, workerGrace, failed)
					w.killed = true
					w.cmd.Process.Kill()
				}
			}
		case s := <-sigs:
			if interrupt == nil {
				interrupt = s
				say("%s: stopping the workers (SIGTERM to each; they finish the step in progress and write what is done; interrupt again to kill them)", signalName(s))
				for _, w := range workers {
					if w.state == nil {
						w.cmd.Process.Signal(syscall.SIGTERM)
					}
				}
				continue
			}
			if !forced {
				forced = true
				say("%s again: killing the workers", signalName(s))
				for _, w := range workers {
					if w.state == nil && !w.killed {
						w.killed = true
						w.cmd.Process.Kill()
					}
				}
				stop() // a third interrupt stops this process at once, should it hang
			}
		}
	}
	if failed != nil && failed.state != nil && !failed.state.Success() {
		// The first failure leads the summary, the others follow as they exited.
		order = append([]*worker{failed}, slices.DeleteFunc(order, func(w *worker) bool { return w == failed })...)
	}
	return outcome(order, interrupt, forced)
}

// outcome is the launcher's result from its workers' exits, in the order they exited. Interrupted: 130 when every
// worker stopped as asked (exit 0 or 130, or killed at the second interrupt). Otherwise the
// worst failure: 2 when a worker found bad input (its own message says which), else 1.
func outcome(workers []*worker, interrupt os.Signal, forced bool) error {
	var failures []string
	worst := exitOK
	asked := true // every worker stopped as an interrupt asks
	for _, w := range workers {
		code := w.state.ExitCode()
		if w.state.Success() {
			continue
		}
		if !(code == exitInterrupted || forced && w.killed) {
			asked = false
		}
		failures = append(failures, fmt.Sprintf("%s %s", w, exitDescription(w.state)))
		if code == exitInput {
			worst = exitInput
		} else if worst == exitOK {
			worst = exitFailed
		}
	}
	if interrupt != nil && asked {
		how := "the workers stopped"
		if forced {
			how = "the workers were killed"
		}
		return interrupted{fmt.Sprintf("interrupted by %s; %s (their messages above say what each wrote)", signalName(interrupt), how)}
	}
	if len(failures) == 0 {
		return nil
	}
	msg := fmt.Sprintf("%d of %d workers failed: %s", len(failures), len(workers), strings.Join(failures, "; then "))
	if worst == exitInput {
		return errors.New(msg) // bad input: exit 2 (no usage hint: the command line was fine)
	}
	return checkFailed{errors.New(msg)}
}

// exitDescription says how a worker ended: "exited with status 1", "was killed by SIGKILL".
func exitDescription(st *os.ProcessState) string {
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "was killed by " + deathSignalName(ws.Signal())
	}
	return fmt.Sprintf("exited with status %d", st.ExitCode())
}

// deathSignalName spells the signals that end processes as kill -l does.
func deathSignalName(s syscall.Signal) string {
	names := map[syscall.Signal]string{
		syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT",
		syscall.SIGILL: "SIGILL", syscall.SIGTRAP: "SIGTRAP", syscall.SIGABRT: "SIGABRT",
		syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE", syscall.SIGKILL: "SIGKILL",
		syscall.SIGSEGV: "SIGSEGV", syscall.SIGPIPE: "SIGPIPE", syscall.SIGALRM: "SIGALRM",
		syscall.SIGTERM: "SIGTERM",
	}
	if n, ok := names[s]; ok {
		return n
	}
	return fmt.Sprintf("signal %d (%v)", int(s), s)
}

func pids(workers []*worker) string {
	var s []string
	for _, w := range workers {
		s = append(s, strconv.Itoa(w.cmd.Process.Pid))
	}
	return strings.Join(s, " ")
}

// workerEnviron is the launcher's environment without the variables it sets for each
// worker (a value inherited from an outer launcher must not reach the wrong rank).
func workerEnviron(environ []string) []string {
	drop := map[string]bool{"RANK": true, "WORLD_SIZE": true, "LOCAL_RANK": true, "LOCAL_WORLD_SIZE": true,
		"MASTER_ADDR": true, "MASTER_PORT": true, envToken: true, envRunID: true, envLauncher: true, envStoreFD: true}
	var kept []string
	for _, kv := range environ {
		if k, _, _ := strings.Cut(kv, "="); !drop[k] {
			kept = append(kept, kv)
		}
	}
	return kept
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// maxLine is the longest line a lineWriter holds back waiting for its end; a longer one is
// cut into lines of this length (each prefixed).
const maxLine = 64 << 10

// lineWriter copies a worker's output to w a whole line at a time (under mu, shared by all
// the workers' writers, so lines of different ranks never mix), prefixing each with prefix
// unless the worker already did.
type lineWriter struct {
	mu     *sync.Mutex
	w      io.Writer
	prefix string
	buf    []byte
}

func (l *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			take := min(len(p), maxLine-len(l.buf))
			l.buf = append(l.buf, p[:take]...)
			p = p[take:]
			if len(l.buf) == maxLine {
				l.emit(nil)
			}
			continue
		}
		l.emit(p[:i+1])
		p = p[i+1:]
	}
	return n, nil
}

// emit writes the held-back bytes and rest as one line (adding the newline it lacks).
func (l *lineWriter) emit(rest []byte) {
	line := append(l.buf, rest...)
	if len(line) == 0 || line[len(line)-1] != '\n' {
		line = append(line, '\n')
	}
	if l.prefix != "" && !bytes.HasPrefix(line, []byte(l.prefix)) {
		line = append([]byte(l.prefix), line...)
	}
	l.mu.Lock()
	l.w.Write(line) // a failing output (a closed pipe) must not stop the supervision
	l.mu.Unlock()
	l.buf = l.buf[:0]
}

// flush writes a last line that lacks its newline.
// IsTerminal passes the terminal question through (a worker's own stderr is a lineWriter),
// so start-up notes still show on a terminal.
func (l *lineWriter) IsTerminal() bool { return isTerminal(l.w) }

func (l *lineWriter) flush() {
	if l != nil && len(l.buf) > 0 {
		l.emit(nil)
	}
}
