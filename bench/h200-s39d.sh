#!/usr/bin/env bash
# Session 39, call d: issue 15's offloaded batch rows with the plan's floor
# that `bench --batch` now prints (everything streamed and 8 GiB of
# weights, B = 64 and 256, decode at 512), and cmd/infer's batch-bench
# tests on the GPU.
# Usage (repo root, GPU machine): bash bench/h200-s39d.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=300
start_call cmd/infer
log issue15
BT=90 one offload-batch NOOP=1 -- --model $m --budgets 0,8GiB --batch 64,256 --context 512 --iters 3 --warmup 3
grep -E '^(budget|0 |8GiB)' "$out/offload-batch.txt" >>"$out/summary.txt"
log tests
TT=60 runt infer infer cmd/infer 'TestBenchBatch'
tests_done
finish
