#!/usr/bin/env bash
# ppc's CUDA device on a GPU, checked and measured in one command (README, "The CUDA device"):
#
#   bash bench/gpu-build.sh   # where Go is: builds .gpu/ (ppc, the GPU test binary, plans)
#   bash bench/gpu.sh         # on the GPU machine, from the repository root, .gpu/ beside it
#
# The machine needs the NVIDIA driver, NVRTC and cuBLASLt (a CUDA toolkit, or PyTorch's pip
# wheels, which ppc finds in the python3 on PATH's site-packages), and python3 with CUDA
# torch for PyTorch's figures; Go only if .gpu/ is missing. It runs, in parallel:
#   - every kernel case against the CPU device (TestGPUKernels), and the misaligned GEMMs
#     staged on padded copies (TestGPUMisalignedGemm);
#   - the equivalence grid against the CPU device (TestGPUTrainsLikeCPU);
#   - the README's main job (tiny GPT, pp 2 × tp 2 × dp 2 with sp, 8 ranks in one process)
#     for 20 steps on the GPU and on the CPU: the losses' largest relative difference;
#   - two processes on this machine's GPU(s) over the host transport (pp 2), against the CPU;
#   - compute-sanitizer's memcheck and racecheck on two steps of the tiny GPT in bf16;
# then, one at a time: a trace of three GPT-2-small steps (each instruction timed to its end:
# where the time goes), ppc's GPT-2-small training step, bf16 GEMMs and fused attention
# (forward + backward at seq 1024/4096/8192 against SDPA's), PyTorch's step (eager
# with SDPA, eager with materialised attention, torch.compile) and torch.matmul. Logs go to
# $OUT (default: a new temporary folder), as logs.tgz; a table of results comes last. Each
# check has a time limit, and the whole run ends within GPU_BUDGET seconds (default 540: 9 of a
# session's 15 device minutes, leaving a narrowed rerun room).
# --no-torch leaves PyTorch's figures out (a rerun after a fix: they do not change), and
# TORCH_RUNS="sdpa" keeps only the step with SDPA (the budget's reference) of them. A rerun
# after a kernel's fix can narrow the correctness checks: PPC_GPU_CASES, a regular expression
# of kernel case names (e.g. attention), and GPU_GRID, one of the grid's subtests (e.g. bf16).
# KERNELS_LIMIT (seconds, default 360) bounds the kernel cases.
set -uo pipefail
cd "$(dirname "$0")/.."
budget=${GPU_BUDGET:-540}
deadline=$((SECONDS + budget - 20))
torch=1
[ "${1:-}" = "--no-torch" ] && torch=  # a rerun after a fix: PyTorch's figures do not change
root=$PWD
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
logs=$(mktemp -d)
results=$logs/results.txt
: >"$results"
export PPC_CUDA_CACHE=${PPC_CUDA_CACHE:-$logs/cache}
bin=$root/.gpu
if [ ! -x "$bin/ppc" ] || [ ! -x "$bin/cuda.test" ]; then
  bash bench/gpu-build.sh || { echo "bench/gpu.sh: .gpu/ is missing and could not be built (run bench/gpu-build.sh where Go is)"; exit 2; }
fi
ppc=$bin/ppc
py=python3

# record NAME STATUS SECONDS DETAIL
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$results"; }

# check NAME LIMIT COMMAND...: runs COMMAND with a time limit, its output in NAME.log, and
# records pass or FAIL (with the log's last line).
check() {
  local name=$1 limit=$2 t0=$SECONDS rc
  shift 2
  # Never past the run's deadline, so that the table and the logs are always written.
  limit=$((limit < deadline - SECONDS ? limit : deadline - SECONDS))
  if [ $limit -lt 10 ]; then
    record "$name" SKIP 0 "the run's ${budget}s budget (GPU_BUDGET) is spent"
    return
  fi
  timeout -k 5 "$limit" "$@" >"$logs/$name.log" 2>&1
  rc=$?
  local detail
  detail=$(grep -E '^(--- FAIL|FAIL|panic|.*[Ee]rror)' "$logs/$name.log" | head -1 | cut -c1-150)
  if [ $rc -eq 0 ] && grep -q -- '--- SKIP' "$logs/$name.log"; then
    record "$name" SKIP $((SECONDS - t0)) "$(grep -B1 -- '--- SKIP' "$logs/$name.log" | head -1 | sed 's/^ *//' | cut -c1-150)"
  elif [ $rc -eq 0 ]; then
    record "$name" pass $((SECONDS - t0)) "$(grep -v '^[[:space:]]*$' "$logs/$name.log" | tail -1 | cut -c1-150)"
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    record "$name" FAIL $((SECONDS - t0)) "timed out after ${limit}s"
  else
    record "$name" FAIL $((SECONDS - t0)) "exit $rc: ${detail:-$(tail -1 "$logs/$name.log" | cut -c1-150)}"
  fi
}

# incuda NAME LIMIT COMMAND...: check, run where the CUDA device's test binary finds its
# testdata; gotest NAME LIMIT ARGS...: that test binary.
incuda() {
  local name=$1 limit=$2
  shift 2
  check "$name" "$limit" bash -c 'cd runtime/cuda && exec "$@"' incuda "$@"
}
gotest() {
  local name=$1 limit=$2
  shift 2
  incuda "$name" "$limit" "$bin/cuda.test" "$@"
}

# lossdiff A.json B.json: the largest relative difference of two runs' per-step losses.
lossdiff() {
  $py - "$1" "$2" <<'PY'
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(f) if '"loss"' in l] for f in sys.argv[1:3])
assert a and len(a) == len(b), f"{len(a)} and {len(b)} steps"
d = max(abs(x - y) / abs(y) for x, y in zip(a, b))
print(f"{len(a)} steps, losses {a[0]:.6f} → {a[-1]:.6f}, CPU {b[0]:.6f} → {b[-1]:.6f}, max rel diff {d:.2e}")
sys.exit(0 if d <= 1e-4 else 1)
PY
}

# versus PLAN STEPS ARGS...: the plan on the GPU (with ARGS) and on the CPU, losses compared.
versus() {
  local plan=$1 steps=$2 tag=$3
  shift 3
  "$ppc" run "$plan" --device cuda --steps "$steps" --log-json "$logs/$tag-cuda.json" "$@" &&
    "$ppc" run "$plan" --steps "$steps" --log-json "$logs/$tag-cpu.json" "$@" &&
    lossdiff "$logs/$tag-cuda.json" "$logs/$tag-cpu.json"
}
export -f versus lossdiff
export ppc py logs

{
  date -u '+%Y-%m-%d %H:%M UTC'
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1
  "$ppc" devices
  $py -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version())' 2>&1
} | tee "$logs/machine.txt"
if ! "$ppc" devices | grep -q '^cuda   usable'; then
  record discovery FAIL 0 "ppc devices finds no usable CUDA: see machine.txt"
  # Go on with the folders found by hand, so that the rest of the run still tells something.
  dirs=$(find /opt /usr/local /usr/lib /root -name 'libnvrtc.so.*' -o -name 'libcublasLt.so.*' -o -name 'libnccl.so.*' 2>/dev/null | xargs -r -n1 dirname | sort -u | paste -sd:)
  export LD_LIBRARY_PATH=$dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  "$ppc" devices 2>&1 | tee -a "$logs/machine.txt"
fi
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer /opt/nvidia/*/compute-sanitizer 2>/dev/null | head -1)

# torch.compile's compile overlaps the checks; its timing waits for the go file.
go_file=$logs/go
# TORCH_RUNS narrows PyTorch's step figures to save device time: "sdpa" (always run: the
# budget's reference), "math" (materialised attention) and "compile" (torch.compile).
torch_runs=${TORCH_RUNS:-sdpa math compile}
have_torch=
if [ -n "$torch" ] && $py -c 'import torch' 2>/dev/null; then
  have_torch=1
  compile_pid=
  if [[ " $torch_runs " == *" compile "* ]]; then
    timeout $((deadline - SECONDS)) $py bench/gpt2_pytorch.py --attn sdpa --compile --wait "$go_file" >"$logs/torch-compile.log" 2>&1 &
    compile_pid=$!
  fi
fi

# Correctness, in parallel.
pids=()
gotest kernels "${KERNELS_LIMIT:-360}" -test.run '^TestGPU(Kernels|MisalignedGemm)$' -test.v -test.count=1 &
pids+=($!)
gotest grid 300 -test.run "^TestGPUTrainsLikeCPU\$${GPU_GRID:+/$GPU_GRID}" -test.v -test.count=1 &
pids+=($!)
check readme-job 240 bash -c 'versus "$0" 20 main' "$bin/plans/main" &
pids+=($!)
check two-processes 240 bash -c 'versus "$0" 5 pp2 --nproc 2' "$bin/plans/pp2" &
pids+=($!)
if [ -n "$sanitizer" ]; then
  for tool in memcheck racecheck; do
    check $tool 300 "$sanitizer" --tool $tool --error-exitcode 9 "$ppc" run "$bin/plans/one" --device cuda --steps 2 &
    pids+=($!)
  done
else
  record sanitizer FAIL 0 "compute-sanitizer not found"
fi
wait "${pids[@]}"

# Speed, one at a time.
check ppc-trace 120 "$ppc" run "$bin/plans/small" --device cuda --steps 3 --trace "$logs/trace.json"
gotest ppc-bench 300 -test.run '^$' -test.bench '^BenchmarkGPT2SmallStep$|^BenchmarkGEMM$|^BenchmarkSoftmax$' -test.benchtime 20x -test.count=1 -test.v
gotest ppc-attention 120 -test.run '^$' -test.bench '^BenchmarkAttention$' -test.benchtime 10x -test.count=1 -test.v
# Nsight Compute on the slowest sites: the fused attention's kernels at seq 1024 (forward and
# backward tiles: how far from the chip's limits, what limits occupancy).
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -n "$ncu" ]; then
  incuda ncu-attention 120 "$ncu" --clock-control none --section SpeedOfLight --section LaunchStats --section Occupancy --launch-count 4 "$bin/cuda.test" -test.run '^$' -test.bench '^BenchmarkAttention$/^1024$' -test.benchtime 1x
fi
if [ -n "$have_torch" ]; then
  check torch-matmul 120 $py bench/gpt2_pytorch.py --matmul 4096,8192,head
  check torch-attention 120 $py bench/gpt2_pytorch.py --attention 1024,4096,8192
  check torch-sdpa 180 $py bench/gpt2_pytorch.py --attn sdpa
  [[ " $torch_runs " == *" math "* ]] && check torch-math 180 $py bench/gpt2_pytorch.py --attn math
  touch "$go_file"
  t0=$SECONDS
  if [ -n "$compile_pid" ]; then
    wait "$compile_pid" && record torch-compile pass $((SECONDS - t0)) "$(tail -1 "$logs/torch-compile.log")" ||
      record torch-compile FAIL $((SECONDS - t0)) "$(tail -1 "$logs/torch-compile.log" | cut -c1-150)"
  fi
else
  record torch SKIP 0 "--no-torch, or no python3 with torch"
fi

# The figures.
field() { grep -h "$1.*$2" "$logs"/ppc-bench.log 2>/dev/null | head -1 | awk -v u="$2" '{ for (i = 2; i <= NF; i++) if ($i == u) { print $(i-1); exit } }'; }
ppc_tps=$(field 'BenchmarkGPT2SmallStep' tokens/s)
ppc_mfu=$(field 'BenchmarkGPT2SmallStep' MFU%)
ppc_ms=$(field 'BenchmarkGPT2SmallStep' ms/step)
{
  echo
  echo "== bench/gpu.sh, $(date -u '+%Y-%m-%d'), $(head -2 "$logs/machine.txt" | tail -1)"
  grep -E '^ *(NVRTC|cuBLASLt|NCCL|driver) ' "$logs/machine.txt" | awk '{ print "   " $1, $2 }' | paste -sd, -
  grep '^torch ' "$logs/machine.txt"
  echo
  printf '%-14s %-5s %5s  %s\n' check result s detail
  while IFS=$'\t' read -r n s t d; do printf '%-14s %-5s %5s  %s\n' "$n" "$s" "$t" "$d"; done <"$results"
  echo
  echo "GPT-2 small training step, 8 × 1024 tokens, bf16, AdamW (tokens/s; ratio ppc / peer):"
  printf '  %-26s %10s  %s\n' "ppc" "${ppc_tps:-?}" "${ppc_ms:-?} ms/step, MFU ${ppc_mfu:-?}%"
  for m in "sdpa eager" "math eager" "sdpa compiled"; do
    tps=$(grep -h "^pytorch $m:" "$logs"/torch-*.log 2>/dev/null | awk '{ print $4 }')
    ratio=$(awk -v a="${ppc_tps:-0}" -v b="${tps:-0}" 'BEGIN { if (a > 0 && b > 0) printf "%.2f×", a / b; else print "?" }')
    printf '  %-26s %10s  ppc/peer %s\n' "pytorch $m" "${tps:-?}" "$ratio"
  done
  echo "attention softmax [8,12,1024,1024] bf16: $(field 'BenchmarkSoftmax' GB/s) GB/s"
  echo "fused attention forward + backward, causal bf16, 12 heads of 64, 8192 tokens (ms; ratio torch / ppc: above 1, ppc is faster):"
  for n in 1024 4096 8192; do
    a=$(grep -h "BenchmarkAttention/$n.* ms" "$logs"/ppc-attention.log 2>/dev/null | awk '{ for (i = 2; i <= NF; i++) if ($i == "ms") print $(i-1) }')
    b=$(grep -h "torch sdpa attention $n:" "$logs"/torch-attention.log 2>/dev/null | awk '{ print $5 }')
    ratio=$(awk -v a="${a:-0}" -v b="${b:-0}" 'BEGIN { if (a > 0 && b > 0) printf "%.2f×", b / a; else print "?" }')
    printf '  seq %-5s ppc %8s ms  torch sdpa %8s ms  torch/ppc %s\n' "$n" "${a:-?}" "${b:-?}" "$ratio"
  done
  echo "bf16 GEMM n³, and GPT-2's head 8192×768×50257 and its two gradients as the step runs them (TFLOP/s):"
  for n in 4096 8192 head head_dx head_dw; do
    a=$(grep -h "BenchmarkGEMM/$n-[0-9].*TFLOP/s" "$logs"/ppc-bench.log 2>/dev/null | awk '{ for (i = 2; i <= NF; i++) if ($i == "TFLOP/s") print $(i-1) }')
    b=$(grep -h "torch.matmul $n:" "$logs"/torch-matmul.log 2>/dev/null | awk '{ print $3 }')
    ratio=$(awk -v a="${a:-0}" -v b="${b:-0}" 'BEGIN { if (a > 0 && b > 0) printf "%.2f×", a / b; else print "?" }')
    printf '  %-6s ppc %7s  torch.matmul %7s  ppc/torch %s\n' "$n" "${a:-?}" "${b:-?}" "$ratio"
  done
} | tee "$logs/summary.txt"
tar -C "$logs" --exclude cache -czf "$out/logs.tgz" . && cp "$logs/summary.txt" "$out/summary.txt"
echo "logs: $out/logs.tgz"
! grep -q $'\tFAIL\t' "$results"
