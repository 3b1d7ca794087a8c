#!/usr/bin/env bash
# Builds, on a machine with Go, what bench/gpu.sh runs on a GPU machine that has none: the
# ppc binary, the CUDA device's test binary (the GPU suite and benchmarks) and the plans the
# checks run, into .gpu/ (ignored by git). Copy or carry .gpu/ with the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .gpu
mkdir -p .gpu/plans
go build -trimpath -ldflags='-s -w' -o .gpu/ppc ./cmd/ppc
go test -c -trimpath -ldflags='-s -w' -o .gpu/cuda.test ./runtime/cuda
ppc=.gpu/ppc
m=testdata/models/gpt.ppm
# The README's main job; the same model on one rank in bf16 (the sanitizer's run: the
# tensor-core attention kernels and the casts); a pipeline of two
# ranks (the two-process run); GPT-2 small as the benchmark runs it (the step's trace).
$ppc compile $m --preset tiny --pp 2 --tp 2 --sp --dp 2 --microbatches 4 -o .gpu/plans/main >/dev/null
$ppc compile $m --preset tiny --precision bf16 --microbatches 2 -o .gpu/plans/one >/dev/null
$ppc compile $m --preset tiny --pp 2 --microbatches 4 -o .gpu/plans/pp2 >/dev/null
$ppc compile $m --preset small --precision bf16 --microbatches 1 -o .gpu/plans/small >/dev/null
du -sh .gpu
