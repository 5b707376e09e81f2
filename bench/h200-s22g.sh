#!/usr/bin/env bash
# Session 22, call g (about 3 minutes): why prefill figures move ~3%
# between machines: the SM clock, power draw and throttle reasons sampled
# every 100 ms (nvidia-smi) through a prefill of 8,192 tokens and a
# 64 x 512 packed step with the default (issue 15).
# Usage (repo root, GPU machine): bash bench/h200-s22g.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=185
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
(MT=240 make_models) &
wait
git rev-parse --short HEAD >"$out/commit.txt" 2>/dev/null
nvidia-smi -q -d PERFORMANCE,POWER,CLOCK >"$out/smi-before.txt" 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 100 >"$out/smi.csv" 2>&1 &
smi=$!
P="--model $m --budgets resident --mode prefill --warmup 1"
log pf; one pf FT_TOKEN_TRACE=0 -- $P --tokens 8192 --iters 3
log pk; one pk FT_TOKEN_TRACE=0 -- $P --batch 64 --tokens 512 --iters 2
log done-runs
kill $smi 2>/dev/null
nvidia-smi -q -d PERFORMANCE,POWER,CLOCK >"$out/smi-after.txt" 2>&1
awk -F', ' 'NR>1 && $2+0>0 {n++; c+=$2; p+=$4; if ($2+0<mn || mn==0) mn=$2+0; if ($4+0>mx) mx=$4+0} END {printf "smi: %d samples, SM clock mean %.0f MHz (min %d), power mean %.0f W (max %.0f)\n", n, c/n, mn, p/n, mx}' "$out/smi.csv" | tee -a "$out/summary.txt"
finish
