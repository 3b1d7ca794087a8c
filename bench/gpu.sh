#!/usr/bin/env bash
# The CUDA device's GPU budget in one command (README, "CUDA device"): on a machine with an
# NVIDIA GPU, the driver, and NVRTC + cuBLASLt (a CUDA toolkit or PyTorch's pip wheels), run
#   bash bench/gpu.sh
# from the repository root. It runs the GPU test suite (every kernel and the equivalence grid
# against the CPU device), ppc's GPT-2-small step and 4096³ GEMM benchmarks, PyTorch eager's
# step of the same model (needs python3 with torch), and prints ppc's ratio to PyTorch; with two
# GPUs or more, a data-parallel GPT-2-small run over NCCL.
set -euo pipefail
cd "$(dirname "$0")/.."
go run ./cmd/ppc devices
go test ./runtime/cuda -run 'TestGPU' -count=1 -v | grep -E '^(---|ok|FAIL|PASS)|GPU 0'
out=$(go test ./runtime/cuda -run '^$' -bench 'GPT2SmallStep|GEMM4096' -benchtime 20x -count=1)
echo "$out"
ppc=$(echo "$out" | awk '/BenchmarkGPT2SmallStep/ { for (i = 1; i < NF; i++) if ($(i+1) == "tokens/s") print $i }')
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  ref=$(python3 bench/gpt2_pytorch.py 20)
  echo "$ref"
  torch=$(echo "$ref" | awk '{ print $3 }')
  awk -v a="$ppc" -v b="$torch" 'BEGIN { printf "ppc / pytorch eager: %.2f× (budget: ≥ 0.8×)\n", a / b }'
else
  echo "python3 with CUDA torch not found: PyTorch's figure skipped"
fi
# With two GPUs or more: GPT-2 small data-parallel over two processes, NCCL carrying the
# gradient reductions (ordered, device to device): the step's tokens/s against one GPU's.
gpus=$(nvidia-smi -L 2>/dev/null | wc -l || echo 0)
if [ "$gpus" -ge 2 ]; then
  plan=$(mktemp -d)
  go build -o "$plan/ppc" ./cmd/ppc
  "$plan/ppc" compile testdata/models/gpt.ppm --preset small --precision bf16 --dp 2 --microbatches 1 -o "$plan/dp2" >/dev/null
  "$plan/ppc" run "$plan/dp2" --device cuda --nproc 2 --steps 10
else
  echo "fewer than two GPUs: the NCCL data-parallel run is skipped"
fi
