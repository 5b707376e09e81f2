#!/usr/bin/env bash
# Session 38, call b: s38a's A/B again with FT_LAST_LAYER=all known to the
# command line (s38a's runs of it stopped at the unknown variable), and the
# fused-GEMM model test counting the batched forwards' last-layer MLPs on
# their returned rows: issue 15's 64 × 512 packed step, 6 timed steps a run,
# default and FT_LAST_LAYER=all interleaved three times while nvidia-smi
# samples the clocks (smi.txt). Before it, the tests of the two TMA
# epilogues after their staging helpers (gs_stage_begin, gs_stage_store) and
# the q/k/v kernel without its unused pointers: TestGateUpSiLUFusedGPU,
# TestProjectRoPEStoreRowsGPU, TestFusedGEMMsModelGPU under FT_QKV_GEMM=1.
# Usage (repo root, GPU machine): bash bench/h200-s38b.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=540
start_call kernels/cudabackend models/all
log tests
TT=150 runt fused cudabackend kernels/cudabackend 'TestGateUpSiLUFusedGPU|TestProjectRoPEStoreRowsGPU|TestDependentLaunchMatchesSources'
TT=150 runt model all models/all 'LastLayer|FusedGEMMsModel'
FT_QKV_GEMM=1 TT=150 runt model-qkv all models/all 'FusedGEMMsModel'
tests_done
log issue15
smi_start
P="--model $m --budgets resident --warmup 1"
for r in a b c; do
  BT=100 one pk64-all-$r FT_LAST_LAYER=all -- $P --mode prefill --batch 64 --tokens 512 --iters 6
  BT=100 one pk64-def-$r NOOP=1 -- $P --mode prefill --batch 64 --tokens 512 --iters 6
done
smi_stop
for f in "$out"/pk64-*.txt; do echo "$(basename $f .txt) $(grep -h 'steps ms' $f)"; done >>"$out/summary.txt"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv >>"$out/summary.txt" 2>&1
finish
