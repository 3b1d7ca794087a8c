package runtime_test

import (
	"net"
	"os"
	"testing"

	"ppc.dev/ppc/internal/jobtest"
	. "ppc.dev/ppc/runtime"
	"ppc.dev/ppc/runtime/cpu"
	"ppc.dev/ppc/runtime/dist"
)

const gptPPM = "../testdata/models/gpt.ppm"

func init() {
	BenchChildren["gpt"] = func(rank, world, n int, master string) error {
		j, err := LoadRank(os.Getenv("PPC_BENCH_DIR"), cpu.New(), rank)
		if err != nil {
			return err
		}
		p, err := j.Join(dist.JoinOptions{Rank: rank, World: world, Master: master, Token: "bench"})
		if err != nil {
			return err
		}
		defer p.Close()
		j.Init(1)
		for range n + 1 {
			if _, err := j.Step(Options{Seed: 1}); err != nil {
				return err
			}
		}
		return nil
	}
}

// BenchmarkGPTTinyStep: a training step of gpt tiny on a 4-rank pipeline (4 micro-batches),
// with every rank a goroutine of one process and with every rank its own process over
// loopback TCP (GOMAXPROCS split between them, as ppc run --nproc does).
func BenchmarkGPTTinyStep(b *testing.B) {
	dir := jobtest.Compile(b, gptPPM, jobtest.GPT(4, 1, 1, 0))
	b.Run("in-process", func(b *testing.B) {
		j, err := Load(dir, cpu.New())
		if err != nil {
			b.Fatal(err)
		}
		j.Init(1)
		j.Step(Options{Seed: 1}) // warm-up, as the processes do
		b.ResetTimer()
		for range b.N {
			if _, err := j.Step(Options{Seed: 1}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("4-processes", func(b *testing.B) {
		os.Setenv("PPC_BENCH_DIR", dir)
		StartBenchChildren(b, "gpt", 4, func(master string, ln net.Listener) {
			j, err := LoadRank(dir, cpu.New(), 0)
			if err != nil {
				b.Fatal(err)
			}
			p, err := j.Join(dist.JoinOptions{Rank: 0, World: 4, Master: master, StoreListener: ln, Token: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			j.Init(1)
			j.Step(Options{Seed: 1})
			b.ResetTimer()
			for range b.N {
				if _, err := j.Step(Options{Seed: 1}); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
		})
	})
}
