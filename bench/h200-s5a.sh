#!/usr/bin/env bash
# The fifth 2026-12-01 session's first GPU call (about 7 minutes): where the
# open figures' time goes, with Nsight Compute's hardware counters (the
# machine's runtime is Firecracker, where ncu reads them) next to the
# event-timed kernel tables: the one-token decode step at 512 (one layer's
# kernels and the LM head), decode attention at 32,000, prefill attention
# and a GEMM at 8,192, then `infer bench --kernel-profile` for decode at
# 512, 8,192 and 32,000 and prefill 8,192 and 64 × 512.
# Usage (repo root, GPU machine): bash bench/h200-s5a.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"; t0=$(date +%s)
log() { echo "== $(date +%T) +$(( $(date +%s) - t0 ))s $*" | tee -a "$out/steps.log"; }
left() { [ $(( $(date +%s) - t0 )) -lt ${1:-480} ]; }
b=bin/infer-cuda; m=/tmp/llama3-8b
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU" | tee -a "$out/steps.log"
log build; timeout 170 make build-cuda >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
log make-model; timeout 120 $b make-model --shape llama3-8b --out $m >"$out/make-model.txt" 2>&1
secs="--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats"
nc() { # tag kernel-regex skip count -- bench args
  left 400 || { echo "ncu $1: skipped (time)" >>"$out/summary.txt"; return; }
  local tag=$1 k=$2 s=$3 c=$4; shift 5
  timeout 100 $NCU --clock-control none -k "regex:$k" --launch-skip $s --launch-count $c $secs --page details \
    $b bench --device cuda:0 --budgets resident "$@" >"$out/ncu-$tag.txt" 2>&1
  echo "ncu $tag rc=$? kernels=$(grep -c '^  [a-z_0-9]*(' "$out/ncu-$tag.txt" 2>/dev/null)" >>"$out/summary.txt"
}
log ncu
# decode at 512: skip the first step's launches, then one layer's kernels plus the LM head's neighbours
nc dec512 'gemv|attn_decode|rope|rmsnorm|argmax|add_' 400 24 -- --model $m --mode decode --context 512 --iters 2 --warmup 1
nc dec32k 'attn_decode' 40 3 -- --model $m --mode decode --context 32000 --iters 1 --warmup 1
nc pre8k 'prefill|fa2|flash|gemm|nvjet|Kernel|silu|rope' 20 12 -- --model $m --mode prefill --tokens 8192 --iters 1 --warmup 0
one() { # tag env... -- bench args
  left || { echo "$1: skipped (time)" | tee -a "$out/summary.txt"; return; }
  local tag=$1; shift; local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  local f="$out/$tag.txt"
  env "${envs[@]}" timeout 60 $b bench --device cuda:0 --budgets resident "$@" >"$f" 2>&1
  local r g
  r=$(grep -E '^resident' "$f" | awk '{printf "row: %s ", $0}' | tr -s ' ')
  g=$(grep replayed "$f" | sed 's/.*device: /graph /')
  echo "$tag: $r $g" | tee -a "$out/summary.txt"
}
log benches
one dec512-prof NOOP=1 -- --model $m --mode decode --context 512 --iters 20 --kernel-profile
one dec8k-prof NOOP=1 -- --model $m --mode decode --context 8192 --iters 5 --warmup 1 --kernel-profile
one dec32k-prof NOOP=1 -- --model $m --mode decode --context 32000 --iters 5 --warmup 1 --kernel-profile
one pre8k-prof NOOP=1 -- --model $m --mode prefill --tokens 8192 --iters 2 --warmup 1 --kernel-profile
one packed-prof NOOP=1 -- --model $m --batch 64 --mode prefill --tokens 512 --iters 2 --warmup 1 --kernel-profile
log done
cd "$out" && tar czf all.tgz *.txt *.log 2>/dev/null; true
