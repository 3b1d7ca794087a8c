"""PyTorch's figures for ppc's GPU budget (bench/gpu.sh runs it; needs torch with CUDA).

Training step: GPT-2 small as testdata/models/gpt.ppm's `small` preset defines it (learned
token and position embeddings, pre-LayerNorm layers, causal attention, tanh-GELU MLP, biases
on every linear, tied head, cross-entropy on the next token), 8 sequences of 1024 tokens,
bf16 autocast, AdamW. --attn sdpa is what a user has by default
(F.scaled_dot_product_attention: a fused flash kernel); --attn math materialises the scores as
ppc does; --compile runs the model through torch.compile. Prints one line:
  pytorch <mode>: <tokens/s> tokens/s <ms> ms/step <TFLOP/s> TFLOP/s <GPU>
with FLOPs counted as ppc's benchmark counts them (6·N + 12·L·d·T per token, PaLM's count).

--matmul N[,N...]: torch.matmul of N³ in bf16 (N "head": GPT-2's tied head, [8192, 768] times
[50257, 768] transposed) on random operands (three operand sets in
turn, so that the L2 cache does not hold them), timed with CUDA events, the median of 20
runs after 5 warm-ups. Prints: torch.matmul <N>: <TFLOP/s> TFLOP/s

--attention S[,S...]: F.scaled_dot_product_attention forward and backward, causal, bf16, at
GPT-2 small's head sizes (12 heads of 64) over 8192 tokens per call (8192/S sequences of S),
timed as --matmul times (median of 20 after 5 warm-ups). Prints:
  torch sdpa attention <S>: <ms> ms <TFLOP/s> TFLOP/s
counting 4·S²·d FLOPs per head forward and 2.5 times that backward, halved for causal masking
(FlashAttention-2's count; ppc's BenchmarkAttention counts the same).

--wait FILE: after warming up (torch.compile's compile included), wait until FILE exists
before timing, so that the compile can overlap other work and the timing cannot."""
import argparse, math, os, statistics, sys, time
import torch
import torch.nn as nn
import torch.nn.functional as F

V, D, H, L, T, B = 50257, 768, 12, 12, 1024, 8


class Layer(nn.Module):
    def __init__(self, attn):
        super().__init__()
        self.attn = attn
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc, self.out = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        q, k, v = (t.view(B, T, H, D // H).transpose(1, 2) for t in (q, k, v))
        if self.attn == "sdpa":
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # the scores materialised, as ppc computes attention
            s = (q @ k.transpose(-1, -2)) / math.sqrt(D // H)
            s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
            a = s.softmax(-1) @ v
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, attn):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, D), nn.Embedding(T, D)
        self.layers = nn.ModuleList(Layer(attn) for _ in range(L))
        self.ln = nn.LayerNorm(D)

    def forward(self, tokens, labels):
        x = self.wte(tokens) + self.wpe(torch.arange(T, device=tokens.device))
        for layer in self.layers:
            x = layer(x)
        logits = self.ln(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.float().view(-1, V), labels.view(-1))


def wait_for(path):
    while path and not os.path.exists(path):
        time.sleep(0.1)


def train(args):
    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = GPT(args.attn).to(dev)
    n = sum(p.numel() for p in model.parameters())
    fwd = torch.compile(model) if args.compile else model
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    tokens = torch.randint(0, V, (B, T), device=dev)
    labels = torch.roll(tokens, -1, 1)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(tokens, labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    wait_for(args.wait)
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / args.steps
    tps = B * T / dt
    flops = (6 * n + 12 * L * D * T) * tps
    mode = args.attn + (" compiled" if args.compile else " eager")
    print(f"pytorch {mode}: {tps:.0f} tokens/s {dt * 1e3:.1f} ms/step {flops / 1e12:.1f} TFLOP/s {torch.cuda.get_device_name()}")


def matmul(sizes):
    for n in sizes:
        # "head": GPT-2's tied head, x [8192, 768] times wte [50257, 768] transposed.
        m, k, cols = (8192, 768, 50257) if n == "head" else (int(n),) * 3
        g = torch.Generator(device="cuda").manual_seed(k)
        rand = lambda r, c: torch.rand(r, c, device="cuda", dtype=torch.bfloat16, generator=g) * 2 - 1
        sets = [(rand(m, k), rand(cols, k).t()) for _ in range(3)]
        for i in range(5):
            a, b = sets[i % 3]
            torch.matmul(a, b)
        times = []
        for i in range(20):
            a, b = sets[i % 3]
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            torch.matmul(a, b)
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) / 1e3)
        print(f"torch.matmul {n}: {2 * m * k * cols / statistics.median(times) / 1e12:.1f} TFLOP/s")


def attention(seqs):
    import torch.nn.functional as F
    for n in seqs:
        s = int(n)
        b, h, d = max(8192 // s, 1), 12, 64
        g = torch.Generator(device="cuda").manual_seed(s)
        rand = lambda: (torch.rand(b, h, s, d, device="cuda", dtype=torch.bfloat16, generator=g) * 2 - 1).requires_grad_()
        q, k, v = rand(), rand(), rand()
        do = torch.rand(b, h, s, d, device="cuda", dtype=torch.bfloat16, generator=g) * 2 - 1
        def step():
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            torch.autograd.grad(o, (q, k, v), do)
        for _ in range(5):
            step()
        times = []
        for _ in range(20):
            st, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            st.record()
            step()
            e.record()
            e.synchronize()
            times.append(st.elapsed_time(e) / 1e3)
        t = statistics.median(times)
        flops = 3.5 * 4 * b * h * s * s * d / 2
        print(f"torch sdpa attention {s}: {t * 1e3:.3f} ms {flops / t / 1e12:.1f} TFLOP/s")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--attn", choices=["sdpa", "math"], default="sdpa")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--wait", default="")
    p.add_argument("--matmul", default="")
    p.add_argument("--attention", default="")
    args = p.parse_args()
    if args.attention:
        attention(args.attention.split(","))
    elif args.matmul:
        matmul(args.matmul.split(","))
    else:
        train(args)


if __name__ == "__main__":
    main()
