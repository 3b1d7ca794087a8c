"""The peers' side of bench/cpu.sh (Debian's python3-torch 1.13 with OpenBLAS, python3-numpy).

  gpt --vocab V --d D --heads H --layers L --seq S --batch B --steps N
      PyTorch eager training steps of testdata/models/gpt.ppm's model (learned token and
      position embeddings, pre-LayerNorm layers, causal attention with the scores
      materialised — torch 1.13 has no fused attention — tanh-GELU MLP, biases, tied head,
      cross-entropy), fp32, AdamW. Prints: median <ms>
  gemm --n N --reps R [--serve]
      numpy float32 N×N×N matmul (OpenBLAS). Prints: median <ms> <GFLOP/s> <GFLOP/cpu-s>
      (the last per second of the process's CPU time, all threads). With --serve it checks
      and warms up, prints "ready", and then runs R calls for every line it reads on stdin,
      printing their mean in ms: kernels/cpu's BenchmarkGemmAgainstOpenBLAS steps it in turn
      with ppc's Gemm.
  export --model NAME --out FILE
      torchvision's NAME (random weights, nothing downloaded) to ONNX, batch 1, inference mode.

Threads come from the environment (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS) and the caller's
taskset; each command prints its peak RSS on stderr as 'rss <KiB>'."""
import argparse, math, resource, statistics, sys, time


def gpt(a):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.set_num_threads(int(__import__("os").environ.get("OMP_NUM_THREADS", "1")))
    V, D, H, L, T, B = a.vocab, a.d, a.heads, a.layers, a.seq, a.batch

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
            self.q, self.k, self.v, self.o = (nn.Linear(D, D) for _ in range(4))
            self.fc, self.proj = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

        def forward(self, x):
            h = self.ln1(x)
            q, k, v = (m(h).view(B, T, H, D // H).transpose(1, 2) for m in (self.q, self.k, self.v))
            s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(D // H))
            s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
            y = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, D)
            x = x + self.o(y)
            return x + self.proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, D), nn.Embedding(T, D)
            self.layers = nn.ModuleList(Layer() for _ in range(L))
            self.ln = nn.LayerNorm(D)

        def forward(self, tokens, labels):
            x = self.wte(tokens) + self.wpe(torch.arange(T))
            for layer in self.layers:
                x = layer(x)
            logits = self.ln(x) @ self.wte.weight.t()
            return F.cross_entropy(logits.view(-1, V), labels.view(-1))

    torch.manual_seed(0)
    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = torch.randint(0, V, (B, T))
    labels = torch.randint(0, V, (B, T))
    times = []
    for i in range(a.steps + 1):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        model(tokens, labels).backward()
        opt.step()
        if i > 0:  # the first step allocates
            times.append(time.perf_counter() - t0)
    print("median %.3f" % (1e3 * statistics.median(times)))


def gemm(a):
    import numpy as np

    n = a.n
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, n), dtype=np.float32)
    y = rng.standard_normal((n, n), dtype=np.float32)
    z = np.empty((n, n), dtype=np.float32)
    np.matmul(x, y, out=z)
    ref = x[:4].astype(np.float64) @ y.astype(np.float64)  # a BLAS kernel that is wrong here
    err = np.abs(z[:4] - ref).max() / np.abs(ref).max()
    if not err < 1e-5:
        sys.exit("gemm: OpenBLAS's result is off by %g relative" % err)
    if a.serve:
        print("ready", flush=True)
        for _ in sys.stdin:
            t0 = time.perf_counter()
            for _ in range(a.reps):
                np.matmul(x, y, out=z)
            print("%.4f" % (1e3 * (time.perf_counter() - t0) / a.reps), flush=True)
        return
    times = []
    c0 = time.process_time()
    for _ in range(a.reps):
        t0 = time.perf_counter()
        np.matmul(x, y, out=z)
        times.append(time.perf_counter() - t0)
    cpu = (time.process_time() - c0) / a.reps
    t = statistics.median(times)
    print("median %.3f %.1f %.1f" % (1e3 * t, 2 * n**3 / t / 1e9, 2 * n**3 / cpu / 1e9))


def export(a):
    import torch
    import torchvision.models as tvm

    ctor = {"resnet50": tvm.resnet50, "googlenet": tvm.googlenet, "densenet121": tvm.densenet121,
            "alexnet": tvm.alexnet}[a.model]
    kw = {"weights": None}
    if a.model == "googlenet":
        kw.update(aux_logits=False, init_weights=True)
    torch.manual_seed(0)
    m = ctor(**kw).eval()
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        torch.onnx.export(m, x, a.out, input_names=["input"], output_names=["output"], opset_version=13)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gpt")
    for k in ("vocab", "d", "heads", "layers", "seq", "batch", "steps"):
        g.add_argument("--" + k, type=int, required=True)
    m = sub.add_parser("gemm")
    m.add_argument("--n", type=int, required=True)
    m.add_argument("--reps", type=int, default=5)
    m.add_argument("--serve", action="store_true")
    e = sub.add_parser("export")
    e.add_argument("--model", required=True)
    e.add_argument("--out", required=True)
    a = p.parse_args()
    {"gpt": gpt, "gemm": gemm, "export": export}[a.cmd](a)
    if not getattr(a, "serve", False):
        print("rss %d" % resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)


if __name__ == "__main__":
    main()
