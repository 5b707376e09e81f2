#!/usr/bin/env bash
# Session 38, call b. The last layer past attention on the returned rows
# alone, now also in Forward without allLogits (the last row; lastrows.go),
# and the TMA epilogues' staging helpers (gs_stage_begin, gs_stage_store)
# with the q/k/v kernel's unused pointers dropped. First the kernels' tests
# (TestGateUpSiLUFusedGPU, TestProjectRoPEStoreRowsGPU); then issue 15's
# 64 × 512 packed step (6 timed steps a run) and prefill 8,192 (3 steps),
# FT_LAST_LAYER=all and default interleaved, while nvidia-smi samples the
# clocks (smi.txt); then models/all's GPU tests (the new last-layer tests,
# the op-count tests the change touched, golden, batch, FP8, MoE) and
# TestFusedGEMMsModelGPU under FT_QKV_GEMM=1.
# Usage (repo root, GPU machine): bash bench/h200-s38b.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=560
start_call kernels/cudabackend models/all
log kernel-tests
TT=100 runt fused cudabackend kernels/cudabackend 'TestGateUpSiLUFusedGPU|TestProjectRoPEStoreRowsGPU|TestDependentLaunchMatchesSources'
tests_done || { finish; exit 0; }
log issue15
smi_start
P="--model $m --budgets resident --warmup 1"
for r in a b c; do
  BT=60 one pk64-all-$r FT_LAST_LAYER=all -- $P --mode prefill --batch 64 --tokens 512 --iters 6
  BT=60 one pk64-def-$r NOOP=1 -- $P --mode prefill --batch 64 --tokens 512 --iters 6
done
for r in a b; do
  BT=60 one pf8k-all-$r FT_LAST_LAYER=all -- $P --mode prefill --tokens 8192 --iters 3
  BT=60 one pf8k-def-$r NOOP=1 -- $P --mode prefill --tokens 8192 --iters 3
done
smi_stop
for f in "$out"/pk64-*.txt; do echo "$(basename $f .txt) $(grep -h 'steps ms' $f)"; done >>"$out/summary.txt"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv >>"$out/summary.txt" 2>&1
log model-tests
TT=$(( 560 - ($(date +%s) - t0) )) runt model all models/all 'LastLayer|LastRow|TestBatchEveryDevice|FusedGEMMsModel|GPU$|TestGolden|MoEEveryDevice|TestFamiliesEveryDevice|FP8'
left 540 && FT_QKV_GEMM=1 TT=20 runt model-qkv all models/all 'FusedGEMMsModel'
tests_done
finish
