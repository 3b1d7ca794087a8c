package planner

import (
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"ppc.dev/ppc/compiler"
	"ppc.dev/ppc/passes"
)

// publishedRun is a training run a paper reports, with the configuration ppc is asked to
// predict (its mesh fixed; the rest searched within what the run used) and the paper's own
// FLOP count, by which its TFLOP/s per GPU was computed.
type publishedRun struct {
	name      string
	model     string
	set       map[string]string
	preset    string
	dev       passes.DeviceProfile
	gpus      int
	batch     int // global batch, sequences
	fix       Fixed
	precision string
	tflops    float64 // reported per GPU
	// flops is the paper's FLOPs per step (its TFLOP/s per GPU × GPUs × step time).
	flops float64
}

// megatronFLOPs is Narayanan et al. 2021's FLOPs per step of a GPT with full activation
// recomputation (their equation 3): 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) — four passes of the
// forward's matmuls (forward, recomputed forward, backward counted as two), attention's two
// products in full, the logit layer.
func megatronFLOPs(batch, seq, layers, hidden, vocab float64) float64 {
	return 96 * batch * seq * layers * hidden * hidden * (1 + seq/(6*hidden) + vocab/(16*layers*hidden))
}

// megatron2021 is a row of Narayanan et al. 2021's Table 1 (weak scaling of GPT models on
// Selene's A100s, sequence 2048, vocabulary 51,200, fp16, full recomputation, no sequence
// parallelism or distributed optimizer, Megatron's interleaved schedule).
func megatron2021(params string, heads, hidden, layers, tp, pp, gpus, batch int, tflops float64) publishedRun {
	dp := gpus / (tp * pp)
	sched := "interleaved-1f1b"
	if pp == 1 {
		sched = "1f1b"
	}
	return publishedRun{
		name:  fmt.Sprintf("Megatron-LM 2021 %sB", params),
		model: gptPPM,
		set: map[string]string{"vocab": "51200", "seq": "2048", "d_model": fmt.Sprint(hidden), "n_heads": fmt.Sprint(heads),
			"n_layers": fmt.Sprint(layers)},
		dev: passes.A10080, gpus: gpus, batch: batch, precision: "fp16", tflops: tflops,
		fix:   Fixed{PP: pp, TP: tp, DP: dp, SP: 0, Zero: 0, Recompute: "full", Schedule: sched, TokenSlices: "1"},
		flops: megatronFLOPs(float64(batch), 2048, float64(layers), float64(hidden), 51200),
	}
}

// mcore08 is a row of Megatron-Core r0.8.0's weak-scaling table on H100 (NVIDIA/Megatron-LM's
// README since July 2024, images/model_table.png): GPT models with vocabulary 131,072 and
// sequence 4096, bf16, data parallelism 48, the distributed optimizer (--overlap-param-gather
// needs it), sequence parallelism with tp (--tp-comm-overlap needs it), the interleaved
// schedule where Megatron has it (pp > 2). Its per-GPU teraFLOP/s are model FLOPs as
// megatron/training/training.py counts them at that release: 12·B·s·l·h²·(6 + s/h +
// V/(2·l·h)) — three GEMM passes, attention's products in full, no recomputation. The
// micro-batch size, virtual stages and recomputation are not given: searched.
func mcore08(params string, heads, hidden, layers, tp, pp, gpus, batch int, tflops float64) publishedRun {
	sched, sp := "1f1b", 0
	if pp > 2 {
		sched = "interleaved-1f1b"
	}
	if tp > 1 {
		sp = 1
	}
	b, s, l, h, v := float64(batch), 4096.0, float64(layers), float64(hidden), 131072.0
	return publishedRun{
		name:  fmt.Sprintf("Megatron-Core r0.8 %sB", params),
		model: gptPPM,
		set: map[string]string{"vocab": "131072", "seq": "4096", "d_model": fmt.Sprint(hidden), "n_heads": fmt.Sprint(heads),
			"n_layers": fmt.Sprint(layers)},
		dev: passes.H100, gpus: gpus, batch: batch, precision: "bf16", tflops: tflops,
		fix:   Fixed{PP: pp, TP: tp, DP: gpus / (tp * pp), SP: sp, Zero: 1, Schedule: sched, TokenSlices: "1"},
		flops: 12 * b * s * l * h * h * (6 + s/h + v/(2*l*h)),
	}
}

func mustDevice(spec string) passes.DeviceProfile {
	d, err := passes.ParseDevice(spec)
	if err != nil {
		panic(err)
	}
	return d
}

var publishedRuns = []publishedRun{
	megatron2021("1.7", 24, 2304, 24, 1, 1, 32, 512, 137),
	megatron2021("3.6", 32, 3072, 30, 2, 1, 64, 512, 138),
	megatron2021("7.5", 32, 4096, 36, 4, 1, 128, 512, 142),
	megatron2021("18.4", 48, 6144, 40, 8, 1, 256, 1024, 135),
	megatron2021("39.1", 64, 8192, 48, 8, 2, 512, 1536, 138),
	megatron2021("76.1", 80, 10240, 60, 8, 4, 1024, 1792, 140),
	megatron2021("145.6", 96, 12288, 80, 8, 8, 1536, 2304, 148),
	megatron2021("310.1", 128, 16384, 96, 8, 16, 1920, 2160, 155),
	megatron2021("529.6", 128, 20480, 105, 8, 35, 2520, 2520, 163),
	megatron2021("1008", 160, 25600, 128, 8, 64, 3072, 3072, 163),
	// BLOOM 176B (BigScience 2022): 384 A100 80GB on Jean Zay, TP4 PP12 DP8, ZeRO-1, bf16,
	// full recomputation, batch 2048 of 2048 tokens, 156 TFLOP/s per GPU sustained (GENCI's
	// report of the run, https://www.genci.fr/en/news/bloom-one-largest-open-multilingual-nlp-
	// models-awarded-best-hpc-collaboration-hpc-wire-readers; the model card's "about 150" is
	// the same figure rounded) by Megatron-DeepSpeed's count, the recomputed forward included
	// (megatronFLOPs). Jean Zay's nodes have 4 × 100 Gbit/s Omni-Path: 6.25 GB/s per GPU
	// between nodes, for pipeline transfers too. ALiBi and the embedding LayerNorm are left
	// out (gpt.ppm's learned positions instead); the embedding is the checkpoint's 250,880 rows.
	{name: "BLOOM 176B", model: gptPPM,
		set: map[string]string{"vocab": "250880", "seq": "2048", "d_model": "14336", "n_heads": "112", "n_layers": "70"},
		dev: mustDevice("a100-80gb{inter_node_bandwidth=6.25e9,link_bandwidth=6.25e9}"), gpus: 384, batch: 2048, precision: "bf16", tflops: 156,
		fix:   Fixed{PP: 12, TP: 4, DP: 8, SP: 0, Zero: 1, MicrobatchSize: 2, Recompute: "full", Schedule: "1f1b", TokenSlices: "1"},
		flops: megatronFLOPs(2048, 2048, 70, 14336, 250880)},
	// Of its nine rows, the two where ppc's memory model holds Megatron's configuration
	// without recomputation and the data-parallel reduction is a small part of the step (24
	// and 64 micro-batches per replica). The other seven are in the README with why they
	// miss: dp 48 = 3·16 divides no dim of these models, so ppc's ZeRO cannot shard their
	// optimizer state (Megatron's distributed optimizer pads a flat buffer) — 70B and 314B
	// do not fit and 119B needs full recomputation — and the pp 1 rows (1 to 4 micro-batches
	// per replica) are dominated by the gradient reduction Megatron overlaps with the
	// backward and the next forward (--overlap-grad-reduce, --overlap-param-gather), which
	// ppc prices exposed.
	mcore08("177", 96, 12288, 96, 8, 6, 2304, 1152, 432.8),
	mcore08("462", 144, 18432, 112, 8, 16, 6144, 3072, 459.9),
	// JaxPP (Xhebraj et al. 2024): GPT-3 175B on 128 H100, batch 256 of 2048 tokens, PP8 TP8
	// DP2: 9.64 s, 457 TFLOP/s per GPU counted as model FLOPs (6 per parameter and token and
	// attention's products, no recomputation: 9.6 s at 457).
	{name: "JaxPP GPT-3 175B", model: gptPPM, preset: "gpt3-175b", set: map[string]string{"vocab": "50264"},
		dev: passes.H100, gpus: 128, batch: 256, precision: "bf16", tflops: 457,
		fix:   Fixed{PP: 8, TP: 8, DP: 2, SP: -1, Zero: -1, TokenSlices: "1"},
		flops: 457e12 * 128 * 9.64},
}

// TestPublishedRuns predicts each published run's step time for its own configuration and
// compares the TFLOP/s per GPU it implies, counted as the paper counts, with the reported
// figure: within 15%. Runs whose prediction cannot be made honest are not rows (NeMo's and
// Llama 3's, whose recomputation and overlap the papers do not give; Megatron-Turing NLG's,
// whose DeepSpeed pipeline ran 30% below Megatron's on the same model and machines; OPT-175B's,
// 67 predicted against its "up to 147", ZeRO-3's collectives priced per tensor without the
// prefetch's overlap; seven
// of Megatron-Core r0.8's, above); the README says why. PUBLISHED=substring runs only the matching rows; PUBLISHED_PICK=1 also logs ppc's own
// pick for the same GPUs and batch (the README's last column).
func TestPublishedRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("searches the published meshes of models up to 1T parameters")
	}
	only := os.Getenv("PUBLISHED")
	for _, r := range publishedRuns {
		if only != "" && !strings.Contains(r.name, only) {
			continue
		}
		t.Run(r.name, func(t *testing.T) {
			req := Request{Model: r.model, Load: compiler.LoadOptions{Preset: r.preset, Set: r.set}, Device: r.dev, GPUs: r.gpus,
				GlobalBatch: r.batch, Precision: r.precision, Fix: r.fix, Top: 1}
			res, err := Search(req)
			if err != nil {
				t.Fatal(err)
			}
			p := res.Plans[0]
			got := r.flops / p.StepTime / float64(r.gpus) / 1e12
			pub := r.flops / (r.tflops * 1e12 * float64(r.gpus))
			t.Logf("%s: reported %.0f TFLOP/s (%.2f s a step), ppc predicts %.2f s (ideal %.2f + bubble %.2f + collectives %.2f + transfers %.2f) → %.0f TFLOP/s (%+.1f%%): %s",
				r.name, r.tflops, pub, p.StepTime, p.Ideal, p.BubbleTime, p.Collectives, p.Transfers, got, 100*(got/r.tflops-1), p.Config.describe())
			if os.Getenv("PUBLISHED_PICK") != "" {
				// ppc's own pick for the same GPUs and batch, for the README's last column.
				req.Fix = Fixed{SP: -1, Zero: -1}
				if own, err := Search(req); err == nil {
					o := own.Plans[0]
					t.Logf("%s: ppc's own pick %.2f s → %.0f TFLOP/s: %s", r.name, o.StepTime, r.flops/o.StepTime/float64(r.gpus)/1e12, o.Config.describe())
				} else {
					t.Logf("%s: ppc's own search: %v", r.name, err)
				}
			}
			if math.Abs(got/r.tflops-1) > 0.15 {
				t.Errorf("%s: predicted %.0f TFLOP/s per GPU, reported %.0f: more than 15%% off", r.name, got, r.tflops)
			}
		})
	}
}
