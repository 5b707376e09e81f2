#!/usr/bin/env bash
# Session 39, call a. The last layer of a batched forward makes the
# queries of the rows whose logits it returns alone and attends them as
# decode steps (models/decoder/lastrows.go, attendKept), beside every
# row's keys and values; RoPEStoreKVAt takes either half alone. First the
# kernels' tests (the halves against the whole call, the whole call
# against the CPU, the paged decode attention); then issue 15's 64 × 512
# packed step (6 timed steps a run), FT_LAST_LAYER=attend-all (every row's
# queries, the thirty-eighth session's default) and default interleaved,
# while nvidia-smi samples the clocks (smi.txt), and prefill 8,192; then
# models/all's GPU tests (the last-layer tests, the op counts the change
# touched, golden, batch, FP8, MoE) and TestFusedGEMMsModelGPU under
# FT_QKV_GEMM=1.
# Usage (repo root, GPU machine): bash bench/h200-s39a.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=560
start_call kernels/cudabackend models/all
log kernel-tests
TT=100 runt rope cudabackend kernels/cudabackend 'TestRoPEStoreKVAt|TestPagedDecode|TestProjectRoPEStoreRowsGPU'
tests_done || { finish; exit 0; }
log issue15
smi_start
P="--model $m --budgets resident --warmup 1"
for r in a b c; do
  BT=60 one pk64-att-$r FT_LAST_LAYER=attend-all -- $P --mode prefill --batch 64 --tokens 512 --iters 6
  BT=60 one pk64-def-$r NOOP=1 -- $P --mode prefill --batch 64 --tokens 512 --iters 6
done
BT=60 one pf8k-def-a NOOP=1 -- $P --mode prefill --tokens 8192 --iters 3
smi_stop
for f in "$out"/pk64-*.txt; do echo "$(basename $f .txt) $(grep -h 'steps ms' $f)"; done >>"$out/summary.txt"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv >>"$out/summary.txt" 2>&1
log model-tests
TT=$(( 560 - ($(date +%s) - t0) )) runt model all models/all 'LastLayer|LastRow|TestBatchEveryDevice|FusedGEMMsModel|VarlenContig|MergedGEMMBatch|GPU$|TestGolden|MoEEveryDevice|TestFamiliesEveryDevice|FP8'
left 540 && FT_QKV_GEMM=1 TT=20 runt model-qkv all models/all 'FusedGEMMsModel'
tests_done
finish
