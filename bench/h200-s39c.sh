#!/usr/bin/env bash
# Session 39, call c: issue 15's figures at one commit (the closing
# figures; the peers were measured in s5e and are not rerun here): the
# resident batched decode steps at 512 (B = 64, 256), the offloaded ones
# (everything streamed and 8 GiB of weights, B = 64, 256), decode at
# 32,000 tokens of context, prefill 8,192 and the 64 × 512 packed step
# (6 timed steps, twice).
# Usage (repo root, GPU machine): bash bench/h200-s39c.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=440
start_call
log issue15
R="--model $m --budgets resident"
BT=60 one batch NOOP=1 -- $R --batch 64,256 --context 512 --iters 5 --warmup 2
BT=90 one offload-batch NOOP=1 -- --model $m --budgets 0,8GiB --batch 64,256 --context 512 --iters 3 --warmup 3
BT=40 one d32k NOOP=1 -- $R --mode decode --context 32000 --iters 10 --warmup 2
BT=40 one pf8k NOOP=1 -- $R --warmup 1 --mode prefill --tokens 8192 --iters 3
BT=40 one pk64-a NOOP=1 -- $R --warmup 1 --mode prefill --batch 64 --tokens 512 --iters 6
BT=40 one pk64-b NOOP=1 -- $R --warmup 1 --mode prefill --batch 64 --tokens 512 --iters 6
for f in "$out"/pk64-*.txt; do echo "$(basename $f .txt) $(grep -h 'steps ms' $f)"; done >>"$out/summary.txt"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv >>"$out/summary.txt" 2>&1
finish
