package runtime

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	goruntime "runtime"
	"strconv"
	"testing"
	"time"

	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/cpu"
	"ppc.dev/ppc/runtime/dist"
)

// The transport benchmarks run each rank as its own process: the benchmark's process is
// rank 0, and it starts the others by running this test binary again with PPC_BENCH_RANK
// set (TestMain sends those straight to benchChild).

func TestMain(m *testing.M) {
	if os.Getenv("PPC_BENCH_RANK") != "" {
		if err := benchChild(); err != nil {
			fmt.Fprintln(os.Stderr, "bench child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// benchJob is rank me's job of a world whose ranks run one collective or a ping-pong.
func benchJob(kind string, world, me int) (*Job, error) {
	j := &Job{Plan: testPlan(world), dev: cpu.New(), comm: dist.NewLocal(world)}
	for r := range world {
		var rp rankProg
		switch kind {
		case "allreduce":
			group := make([]int32, world)
			for i := range group {
				group[i] = int32(i)
			}
			rp = rankProg{types: []ir.Type{{DType: ir.F32, Shape: ir.Shape{16 << 20}}},
				instrs: []*pb.Instr{{Kind: pb.Instr_ALL_REDUCE, In: []int32{0}, Group: group}}}
		case "pingpong":
			rp = rankProg{types: []ir.Type{{DType: ir.F32, Shape: ir.Shape{1}}},
				instrs: []*pb.Instr{{Kind: pb.Instr_SEND, In: []int32{0}, Peer: int32(1 - r), Tag: 1}, {Kind: pb.Instr_RECV, Out: []int32{0}, Peer: int32(1 - r), Tag: 1}}}
		}
		rank, err := j.prepare(r, program(r, world, rp), r == me)
		if err != nil {
			return nil, err
		}
		j.add(rank, r == me)
	}
	return j, nil
}

// benchLoop runs the benchmark's operation n times on this process's rank.
func benchLoop(kind string, j *Job, n int) error {
	r := j.Ranks[0]
	it := &r.instrs[0]
	for range n {
		switch kind {
		case "allreduce":
			if err := j.comm.Collective(r.Index, it.coll, it.in[0], it.in[0]); err != nil {
				return err
			}
		case "pingpong":
			b := r.Bufs[0].Data
			if r.Index == 0 {
				if err := j.comm.Send(0, 1, 1, b); err != nil {
					return err
				}
				if err := j.comm.Recv(0, 1, 1, b); err != nil {
					return err
				}
			} else {
				if err := j.comm.Recv(1, 0, 1, b); err != nil {
					return err
				}
				if err := j.comm.Send(1, 0, 1, b); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// BenchChildren runs the child side of benchmarks the external test package defines.
var BenchChildren = map[string]func(rank, world, n int, master string) error{}

func benchChild() error {
	me, _ := strconv.Atoi(os.Getenv("PPC_BENCH_RANK"))
	world, _ := strconv.Atoi(os.Getenv("PPC_BENCH_WORLD"))
	n, _ := strconv.Atoi(os.Getenv("PPC_BENCH_N"))
	kind := os.Getenv("PPC_BENCH_KIND")
	if f := BenchChildren[kind]; f != nil {
		return f(me, world, n, os.Getenv("PPC_BENCH_MASTER"))
	}
	j, err := benchJob(kind, world, me)
	if err != nil {
		return err
	}
	p, err := j.Join(dist.JoinOptions{Rank: me, World: world, Master: os.Getenv("PPC_BENCH_MASTER"), Token: "bench"})
	if err != nil {
		return err
	}
	defer p.Close()
	return benchLoop(kind, j, n)
}

// benchProcesses runs kind on world processes, b.N times, timing rank 0's loop.
func benchProcesses(b *testing.B, kind string, world int) {
	StartBenchChildren(b, kind, world, func(master string, ln net.Listener) {
		j, err := benchJob(kind, world, 0)
		if err != nil {
			b.Fatal(err)
		}
		p, err := j.Join(dist.JoinOptions{Rank: 0, World: world, Master: master, StoreListener: ln, Token: "bench", JoinTimeout: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		if err := benchLoop(kind, j, b.N); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		p.Close()
	})
}

// StartBenchChildren starts ranks 1 … world−1 of a benchmark as processes running kind
// b.N times, runs rank0 (given the rendezvous address and its listener) here, and waits
// for the children.
func StartBenchChildren(b *testing.B, kind string, world int, rank0 func(master string, ln net.Listener)) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	// The processes share this machine's cores, as a --nproc run's do.
	defer goruntime.GOMAXPROCS(goruntime.GOMAXPROCS(max(1, goruntime.NumCPU()/world)))
	var children []*exec.Cmd
	for r := 1; r < world; r++ {
		c := exec.Command(os.Args[0], "-test.run=^$")
		c.Env = append(os.Environ(), "PPC_BENCH_RANK="+strconv.Itoa(r), "PPC_BENCH_WORLD="+strconv.Itoa(world),
			"PPC_BENCH_N="+strconv.Itoa(b.N), "PPC_BENCH_KIND="+kind, "PPC_BENCH_MASTER="+ln.Addr().String(),
			"GOMAXPROCS="+strconv.Itoa(max(1, goruntime.NumCPU()/world)))
		c.Stderr = os.Stderr
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		children = append(children, c)
	}
	rank0(ln.Addr().String(), ln)
	for _, c := range children {
		if err := c.Wait(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTCPAllReduce64MiB: an f32 all-reduce of 64 MiB across 4 processes over loopback
// TCP. busbw is NCCL's bus bandwidth, size·2(n−1)/n per second: what each rank's links carry.
func BenchmarkTCPAllReduce64MiB(b *testing.B) {
	const size, n = 64 << 20, 4
	b.SetBytes(size)
	benchProcesses(b, "allreduce", n)
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(float64(size)*2*(n-1)/n/sec/1e9, "busbw-GB/s")
}

// BenchmarkTCPPingPong4B: a 4-byte message to another process and back over loopback TCP;
// half the time per operation is the one-way latency.
func BenchmarkTCPPingPong4B(b *testing.B) {
	benchProcesses(b, "pingpong", 2)
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N)/2*1e6, "one-way-µs")
}
