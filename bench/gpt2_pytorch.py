"""PyTorch eager reference for ppc's GPU budget: a training step of GPT-2 small as
testdata/models/gpt.ppm's `small` preset defines it (learned token and position embeddings,
pre-LayerNorm layers, causal attention, tanh-GELU MLP, biases on every linear, tied head,
cross-entropy on the next token), 8 sequences of 1024 tokens, bf16 autocast, AdamW.
Prints tokens/s. Run by bench/gpu.sh; needs torch with CUDA."""
import math, sys, time
import torch
import torch.nn as nn
import torch.nn.functional as F

V, D, H, L, T, B = 50257, 768, 12, 12, 1024, 8


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc, self.out = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        q, k, v = (t.view(B, T, H, D // H).transpose(1, 2) for t in (q, k, v))
        # Materialised scores, as ppc computes attention (no fused kernel: an equal comparison).
        s = (q @ k.transpose(-1, -2)) / math.sqrt(D // H)
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
        a = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, D)
        x = x + self.proj(a)
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, D), nn.Embedding(T, D)
        self.layers = nn.ModuleList(Layer() for _ in range(L))
        self.ln = nn.LayerNorm(D)

    def forward(self, tokens, labels):
        x = self.wte(tokens) + self.wpe(torch.arange(T, device=tokens.device))
        for layer in self.layers:
            x = layer(x)
        logits = self.ln(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.float().view(-1, V), labels.view(-1))


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    dev = torch.device("cuda")
    model = GPT().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    tokens = torch.randint(0, V, (B, T), device=dev)
    labels = torch.roll(tokens, -1, 1)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(tokens, labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / steps
    print(f"pytorch eager: {B * T / dt:.0f} tokens/s ({dt * 1e3:.1f} ms/step, {torch.cuda.get_device_name()})")


if __name__ == "__main__":
    main()
