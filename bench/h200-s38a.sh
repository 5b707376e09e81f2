#!/usr/bin/env bash
# Session 38, call a: the batched forward's last layer past attention on the
# returned rows alone (models/decoder/lastrows.go; FT_LAST_LAYER=all runs it
# on every row as before). models/all's batched GPU tests (the new
# TestBatchLastLayerRowsEveryDevice against the full last layer, the batch,
# fused-GEMM, varlen and merged tests); then issue 15's 64 × 512 packed step,
# 6 timed steps a run, default and FT_LAST_LAYER=all interleaved three times
# while nvidia-smi samples the clocks (smi.txt); prefill 8,192 once (a path
# the change leaves alone).
# Usage (repo root, GPU machine): bash bench/h200-s38a.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=540
start_call models/all
log tests
TT=240 runt batch all models/all 'LastLayer|TestBatchEveryDevice|TestBatchHostEveryDevice|FusedGEMMsModel|VarlenContig|MergedGEMMBatch|MoEEveryDevice'
tests_done
log issue15
smi_start
P="--model $m --budgets resident --warmup 1"
for r in a b c; do
  BT=100 one pk64-def-$r NOOP=1 -- $P --mode prefill --batch 64 --tokens 512 --iters 6
  BT=100 one pk64-all-$r FT_LAST_LAYER=all -- $P --mode prefill --batch 64 --tokens 512 --iters 6
done
smi_stop
BT=60 one pf8k-def NOOP=1 -- $P --mode prefill --tokens 8192 --iters 3
grep -h 'steps ms' "$out"/pk64-*.txt >>"$out/summary.txt"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv >>"$out/summary.txt" 2>&1
finish
