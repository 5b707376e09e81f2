#!/usr/bin/env bash
# Session 31, call c: (1) FP8 against BF16 prefill 2,048, interleaved, more
# iterations (s31b had 35.86 against 47.86 ms, 0.749 ×, where s26e had
# 0.726 ×) and one kernel table of the FP8 prefill; (2) issue 15's prefill
# figures: 8,192 tokens and the 64 × 512 packed step, the latter with
# FT_GEMM_SUSTAINED_ROWS=16384 (its 32,768-row GEMMs tuned at sustained
# clocks) and without, interleaved.
# Usage (repo root, GPU machine): bash bench/h200-s31c.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=545
start_call
make_fp8
log prefill-2048
P2="--budgets resident --mode prefill --tokens 2048 --iters 10"
for r in a b; do
  one f8-p2k-$r -- --model $f8 $P2
  one bf-p2k-$r -- --model $m $P2
done
BT=120 one f8-p2k-kp -- --model $f8 --budgets resident --mode prefill --tokens 2048 --iters 3 --kernel-profile
log issue15
P="--model $m --budgets resident --mode prefill --warmup 1"
BT=120 one pf8k -- $P --tokens 8192 --iters 3
for r in a b; do
  BT=150 one pk64-$r -- $P --batch 64 --tokens 512 --iters 2
  BT=150 one pk64-sus-$r FT_GEMM_SUSTAINED_ROWS=16384 -- $P --batch 64 --tokens 512 --iters 2
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu --format=csv >>"$out/summary.txt" 2>&1
finish
