#!/usr/bin/env bash
# Session 21, call f (about 4 minutes): variant wg6o (wg6 with each
# warpgroup's softmax overlapping its own previous P·V): its tests (wg6's
# outputs bit for bit, registers and local memory logged), kernel tables
# of wg6o and wg6 at prefill 8,192 and 64 x 512 packed, forwards
# interleaved, Nsight Compute's details of one wg6o launch (issue 15).
# Usage (repo root, GPU machine): bash bench/h200-s21f.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=250
compile_tests kernels/cudabackend
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
(MT=240 make_models) &
wait
git rev-parse --short HEAD >"$out/commit.txt" 2>/dev/null
log tests
TT=120 runt wg6o cudabackend kernels/cudabackend 'TestPrefillWGModule|TestPrefillWG6Quick|TestPrefillWG6OQuick|TestVarlenContigKernels'
cat "$out/tests.txt" | tee -a "$out/summary.txt"
grep -h -B2 -A12 -- '--- FAIL' "$out"/test-*.log | head -40
grep -h 'registers\|differ from' "$out"/test-wg6o.log | sort | uniq | head -30 | tee -a "$out/summary.txt"
log figures
P="--model $m --budgets resident --mode prefill --warmup 1"
one pf-wg6o-kp FT_PREFILL_VARIANT=wg6o -- $P --tokens 8192 --iters 1 --kernel-profile
one pf-wg6-kp FT_PREFILL_VARIANT=wg6 -- $P --tokens 8192 --iters 1 --kernel-profile
one pk-wg6o-kp FT_PREFILL_VARIANT=wg6o -- $P --batch 64 --tokens 512 --iters 1 --kernel-profile
one pk-wg6-kp FT_PREFILL_VARIANT=wg6 -- $P --batch 64 --tokens 512 --iters 1 --kernel-profile
for r in a b; do for v in wg6o wg6; do one pf-$v-$r FT_PREFILL_VARIANT=$v -- $P --tokens 8192 --iters 3; done; done
left 240 && { log ncu
FT_PREFILL_VARIANT=wg6o timeout 40 ncu --clock-control none -k regex:attn_prefill_wg6o --launch-skip 40 --launch-count 1 \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section InstructionStats \
  --section LaunchStats --page details --print-details all $b bench --device cuda:0 --budgets resident --model $m \
  --mode prefill --tokens 8192 --iters 1 --warmup 1 >"$out/ncu-wg6o.txt" 2>&1; }
finish
