#!/usr/bin/env bash
# Session 37, call d: issue 15's 64 × 512 packed step with every timed step
# printed while nvidia-smi samples the SM clock, power and throttle reasons
# every 200 ms (smi.txt): the default twice, FT_QKV_GEMM=1 between. No
# tests (s37c ran them at this code).
# Usage (repo root, GPU machine): bash bench/h200-s37d.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=400
start_call
log issue15
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 200 >"$out/smi.txt" 2>&1 &
smi=$!
P="--model $m --budgets resident --mode prefill --warmup 1"
BT=100 one pk64-def-a NOOP=1 -- $P --batch 64 --tokens 512 --iters 6
BT=100 one pk64-qkv FT_QKV_GEMM=1 -- $P --batch 64 --tokens 512 --iters 6
BT=100 one pk64-def-b NOOP=1 -- $P --batch 64 --tokens 512 --iters 6
kill $smi
grep -h 'steps ms' "$out"/pk64-*.txt >>"$out/summary.txt"
awk -F', ' 'NR>1 {print $2, $6}' "$out/smi.txt" | sort | uniq -c | sort -rn | head -12 >>"$out/summary.txt"
awk -F', ' 'NR>1 && $4+0 > 650 {n++; c+=$2; p+=$4} END {if (n) printf "loaded samples (over 650 W): %d, mean SM clock %.0f MHz, mean power %.1f W\n", n, c/n, p/n}' "$out/smi.txt" >>"$out/summary.txt"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv >>"$out/summary.txt" 2>&1
finish
