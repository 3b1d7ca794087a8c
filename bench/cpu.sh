#!/usr/bin/env bash
# The CPU device against its peers, side by side (README, "The CPU device against its peers"):
#
#   bash bench/cpu.sh            # every figure, a few minutes on 2 cores
#   bash bench/cpu.sh --quick    # one repetition, the smaller sizes only
#
# It installs the peers itself when they are missing — Debian's python3-torch (PyTorch 1.13,
# OpenBLAS underneath), python3-torchvision, python3-numpy and OpenBLAS with apt-get, npm's
# onnxruntime-node into bench/.peers (ignored by git; --ignore-scripts: its install script only
# fetches CUDA libraries) — and builds ppc into bench/.peers. Then, with ppc and each peer
# pinned to the same cores (taskset) and thread counts (GOMAXPROCS, OMP_NUM_THREADS,
# OPENBLAS_NUM_THREADS, onnxruntime's intra-op threads), runs each comparison REPS times,
# alternating ppc and the peer (the CNNs four steps at a time, 10·REPS blocks each; the GEMMs a
# measurement at a time, 5·REPS each), and prints the median of each side and their ratio:
#   - GPT training steps, fp32 AdamW, testdata/models/gpt.ppm at tiny and GPT-2 widths, 2
#     layers, seq 256 (bench/cpu_peers.py builds the same model in PyTorch eager);
#   - CNN inference, batch 1, steady state: torchvision's resnet50, googlenet (the Inception
#     family with batch norm), densenet121 and alexnet with random weights, exported to ONNX
#     here by torch.onnx.export (nothing downloaded), run by ppc (its runtime, in runtime's
#     BenchmarkCNNAgainstOnnxruntime) and by onnxruntime-node (bench/cpu_ort.js, which that
#     benchmark steps);
#   - float32 GEMM N³, N = 512…4096, against numpy's matmul (OpenBLAS), 1 and 2 threads, a
#     measurement of each in turn (kernels/cpu's BenchmarkGemmAgainstOpenBLAS);
#   - peak RSS of the GPT-2-width training run against PyTorch's, and compile's memory report
#     (plan.json's peak_bytes) against that measured peak.
# Each peer runs with its faster wait policy. PyTorch's threads sleep when idle
# (OMP_WAIT_POLICY=PASSIVE): spinning OpenMP and OpenBLAS threads made its 2-thread step 4–10×
# slower than sleeping ones. onnxruntime keeps its default, threads that spin between
# operators (5–10% faster than sleeping ones), as ppc's kernel helpers spin for up to 0.5 ms
# between parallel regions.
# "speed" is peer time / ppc time (> 1: ppc faster); "rss" is ppc / peer (< 1: ppc smaller).
# Timings on a shared machine are noisy: the figures are medians of interleaved runs, and
# `uptime`'s load average is printed first and last.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=
case "${1:-}" in
--quick) quick=1 ;;
"") ;;
*)
  echo "usage: bash bench/cpu.sh [--quick]" >&2
  exit 2
  ;;
esac
reps=${REPS:-$([ -n "$quick" ] && echo 1 || echo 3)}
threads=${THREADS:-2}
peers=bench/.peers
mkdir -p "$peers"
py=/usr/bin/python3 # Debian's, where python3-torch installs (not a pyenv shim)

# --- the peers --------------------------------------------------------------------------
if ! "$py" -c 'import torch, torchvision, numpy' 2>/dev/null; then
  echo "installing Debian's python3-torch, python3-torchvision, python3-numpy, OpenBLAS…" >&2
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-torch python3-torchvision python3-numpy libopenblas0-pthread >/dev/null
fi
if [ ! -f "$peers/node_modules/onnxruntime-node/package.json" ]; then
  echo "installing onnxruntime-node into $peers…" >&2
  (cd "$peers" && npm install --ignore-scripts --no-audit --no-fund --silent onnxruntime-node@1.30.0 >/dev/null)
fi
cp bench/cpu_ort.js "$peers/ort.js" # node resolves onnxruntime-node beside the script
go build -o "$peers/ppc" ./cmd/ppc
go test -c -o "$peers/kernels.test" ./kernels/cpu
go test -c -o "$peers/runtime.test" ./runtime
ppc=$peers/ppc
# OpenBLAS 0.3.21 (Debian 12) does not know CPUs newer than Cooper Lake and falls back to its
# generic SSE3 kernels ("Prescott"), 3–5× slower; and this workplace's machines export
# OPENBLAS_CORETYPE=Haswell, its AVX2 kernels, which on an AVX-512 CPU run at half its speed
# (2048³ on one Zen 5 core: 95 GFLOP/s, Cooper Lake's kernels 176). So the script names the
# newest kernels OpenBLAS has that the CPU runs, for numpy and PyTorch alike, whatever the
# environment says (cpu_peers.py checks each GEMM's result in float64).
corename() { "$py" -c 'import ctypes; l = ctypes.CDLL("libblas.so.3"); l.openblas_get_corename.restype = ctypes.c_char_p; print(l.openblas_get_corename().decode())'; }
flags=$(grep -m1 '^flags' /proc/cpuinfo)
case "$flags" in
*avx512_bf16*) export OPENBLAS_CORETYPE=Cooperlake ;;
*avx512f*) export OPENBLAS_CORETYPE=SkylakeX ;;
*avx2*) export OPENBLAS_CORETYPE=Haswell ;;
*) unset OPENBLAS_CORETYPE ;;
esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# pin T CMD…: run CMD on the first T cores with T threads for every runtime.
pin() {
  local t=$1
  shift
  taskset -c "0-$((t - 1))" env GOMAXPROCS="$t" OMP_NUM_THREADS="$t" OPENBLAS_NUM_THREADS="$t" OMP_WAIT_POLICY=PASSIVE "$@"
}
median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else print (NR % 2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
# steptimes: the step times (ms) that `ppc run` printed on stdin, the first left out, one a
# line; ppcsteps: their median.
steptimes() { sed -n 's/^step \([0-9]*\) .*time=\([0-9.]*\)\(m\?s\).*/\1 \2 \3/p' | awk '$1 > 1 {print ($3 == "s" ? $2 * 1000 : $2)}'; }
ppcsteps() { steptimes | median; }
row() { printf '%-44s %12s %12s %9s\n' "$@"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f×", a / b}'; }
# results FILE LINE UNIT…: pm, om, pb, ob = the figures a benchmark LINE gives for the four
# UNITs (ppc's and the peer's medians, then their fastest); exits printing FILE where any
# is missing.
results() {
  local file=$1 line=$2 v u
  shift 2
  local vals=()
  for u in "$@"; do
    v=$(awk -v u="$u" '{for (i = 1; i < NF; i++) if ($(i+1) == u) print $i}' <<<"$line")
    if [ -z "$v" ]; then
      echo "no $u in the benchmark's output:" >&2
      cat "$file" >&2
      exit 1
    fi
    vals+=("$v")
  done
  pm=${vals[0]} om=${vals[1]} pb=${vals[2]} ob=${vals[3]}
}

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $(free -g | awk '/^Mem/ {print $2}') GiB; load $(uptime | sed 's/.*average: //')"
echo "peers: PyTorch $("$py" -c 'import torch; print(torch.__version__)'), numpy $("$py" -c 'import numpy; print(numpy.__version__)') on OpenBLAS ($(corename) kernels), onnxruntime-node $(node -p "require('./$peers/node_modules/onnxruntime-node/package.json').version"); $threads threads unless said; $reps repetitions"
echo
row "what" "ppc" "peer" "ratio"

# --- GPT training ------------------------------------------------------------------------
gpt() { # NAME PRESET BATCH STEPS VOCAB D HEADS
  local name=$1 preset=$2 batch=$3 steps=$4 vocab=$5 d=$6 heads=$7 dir=$tmp/gpt-$1
  "$ppc" compile testdata/models/gpt.ppm --preset "$preset" --set n_layers=2 --set seq=256 --set batch="$batch" -o "$dir" >/dev/null
  local p=() t=() r
  for ((r = 0; r < reps; r++)); do
    p+=("$(pin "$threads" /usr/bin/time -f 'rss %M' -o "$tmp/$name.ppc.rss" "$ppc" run "$dir" --steps $((steps + 1)) | ppcsteps)")
    t+=("$(pin "$threads" "$py" bench/cpu_peers.py gpt --vocab "$vocab" --d "$d" --heads "$heads" --layers 2 --seq 256 --batch "$batch" --steps "$steps" 2>"$tmp/$name.torch.rss" | sed -n 's/^median //p')")
  done
  local pm tm
  pm=$(printf '%s\n' "${p[@]}" | median)
  tm=$(printf '%s\n' "${t[@]}" | median)
  row "GPT $name training step, ms (PyTorch eager)" "$pm" "$tm" "$(ratio "$tm" "$pm")"
}
gpt tiny tiny 8 5 512 64 4
if [ -z "$quick" ]; then
  gpt gpt2 small 2 3 50257 768 12
  prss=$(sed -n 's/^rss //p' "$tmp/gpt2.ppc.rss")
  trss=$(sed -n 's/^rss //p' "$tmp/gpt2.torch.rss")
  row "GPT gpt2 peak RSS, MiB (PyTorch)" "$((prss / 1024))" "$((trss / 1024))" "$(ratio "$prss" "$trss")"
  report=$("$py" -c 'import json, sys; print(sum(p["peak_bytes"] for p in json.load(open(sys.argv[1]))["programs"]) // 1024)' "$tmp/gpt-gpt2/plan.json")
  row "GPT gpt2 compile's peak report, MiB (RSS)" "$((report / 1024))" "$((prss / 1024))" "$(ratio "$report" "$prss")"
fi

# --- CNN inference -----------------------------------------------------------------------
models="resnet50 googlenet densenet121 alexnet"
[ -n "$quick" ] && models="resnet50 alexnet"
# A fixed input for ppc (as onnxruntime gets one): synthetic data would add its generation
# (Philox and Box–Muller, a few ms an image) to every step.
[ -f "$peers/input.npy" ] || "$py" -c 'import numpy as np, sys; np.save(sys.argv[1], np.random.default_rng(0).standard_normal((4, 3, 224, 224), dtype=np.float32))' "$peers/input.npy"
# ppc and onnxruntime four steps each in turn, in the same minutes (runtime's
# BenchmarkCNNAgainstOnnxruntime: ppc's plan in the test process, onnxruntime in a node process
# it steps; each side after a pause that lets the other's threads go idle): whole runs of
# each taken in turn swung 20–40% here as the neighbours came and went. The first step of
# each four follows the machine's idling (the "after idle" row); the other three are the
# steady state, the comparison's first row.
for m in $models; do
  onnx=$peers/$m.onnx
  [ -f "$onnx" ] || "$py" bench/cpu_peers.py export --model "$m" --out "$onnx" 2>/dev/null
done
steps=$((10 * reps))
(cd runtime && PPC_BENCH_ORT="$PWD/../$peers/ort.js" PPC_BENCH_MODELS="$models" pin "$threads" "../$peers/runtime.test" \
  -test.run '^$' -test.bench CNNAgainstOnnxruntime -test.benchtime "${steps}x") >"$tmp/cnn.txt"
for m in $models; do
  line=$(grep "CNNAgainstOnnxruntime/$m-" "$tmp/cnn.txt" || true)
  results "$tmp/cnn.txt" "$line" ppc-ms/step ort-ms/step ppc-best-ms ort-best-ms
  row "$m inference, batch 1, ms (onnxruntime)" "$pm" "$om" "$(ratio "$om" "$pm")"
  row "  each side's fastest step" "$pb" "$ob" "$(ratio "$ob" "$pb")"
  results "$tmp/cnn.txt" "$line" ppc-idle-ms ort-idle-ms ppc-idle-ms ort-idle-ms
  row "  the first step after 100 ms idle" "$pm" "$om" "$(ratio "$om" "$pm")"
done

# --- GEMM --------------------------------------------------------------------------------
sizes="512 1024 2048 4096"
[ -n "$quick" ] && sizes="512 1024"
# ppc's Gemm and numpy's matmul a measurement each in turn, in the same minutes (kernels/cpu's
# BenchmarkGemmAgainstOpenBLAS, which steps bench/cpu_peers.py gemm --serve; each side after a
# pause that lets the other's threads go idle), 5·REPS measurements a side: their medians, and
# each side's fastest measurement (the least disturbed by neighbours). A measurement is
# enough calls for ~0.1 s of work on two threads (40 at 512³, 10 at 1024³, 2 at 2048³, 1 at
# 4096³): a single 512³ call would time the helpers' wake-up more than the GEMM.
for t in 1 2; do
  PPC_BENCH_NUMPY="$PWD/bench/cpu_peers.py" PPC_BENCH_PYTHON="$py" PPC_BENCH_SIZES="$sizes" pin "$t" "$peers/kernels.test" \
    -test.run '^$' -test.bench GemmAgainstOpenBLAS -test.benchtime "$((5 * reps))x" >"$tmp/gemm.txt"
  for n in $sizes; do
    line=$(grep -E "GemmAgainstOpenBLAS/$n(-[0-9]+)?[[:space:]]" "$tmp/gemm.txt" || true)
    results "$tmp/gemm.txt" "$line" ppc-GFLOP/s blas-GFLOP/s ppc-best-GFLOP/s blas-best-GFLOP/s
    row "GEMM f32 ${n}³, $t thread(s), GFLOP/s (OpenBLAS)" "$pm" "$om" "$(ratio "$pm" "$om")"
    row "  each side's fastest measurement" "$pb" "$ob" "$(ratio "$pb" "$ob")"
  done
done
echo
echo "load at the end: $(uptime | sed 's/.*average: //')"
