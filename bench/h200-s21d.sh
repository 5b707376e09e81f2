#!/usr/bin/env bash
# Session 21, call d (about 5 minutes): variant wg8 (wg7's lazy maxima
# without its tensor-core row sums) beside wg7 and wg6: the tests, kernel
# tables at prefill 8,192 and 64 x 512 packed, prefill 8,192 forwards
# interleaved, Nsight Compute's details of one wg8 launch (issue 15).
# Usage (repo root, GPU machine): bash bench/h200-s21d.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=400
compile_tests kernels/cudabackend
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
(MT=240 make_models) &
wait
git rev-parse --short HEAD >"$out/commit.txt" 2>/dev/null
log tests
TT=150 runt lazy cudabackend kernels/cudabackend 'TestPrefillWGModule|TestPrefillWG7Quick|TestVarlenContigKernels'
cat "$out/tests.txt" | tee -a "$out/summary.txt"
grep -h -B2 -A12 -- '--- FAIL' "$out"/test-*.log | head -60
grep -h 'differ from' "$out"/test-lazy.log | sort | uniq | head -40 | tee -a "$out/summary.txt"
log figures
P="--model $m --budgets resident --mode prefill --warmup 1"
for v in wg8 wg7 wg6; do one pf-$v-kp FT_PREFILL_VARIANT=$v -- $P --tokens 8192 --iters 1 --kernel-profile; done
for v in wg8 wg6; do one pk-$v-kp FT_PREFILL_VARIANT=$v -- $P --batch 64 --tokens 512 --iters 1 --kernel-profile; done
for r in a b; do for v in wg8 wg7 wg6; do one pf-$v-$r FT_PREFILL_VARIANT=$v -- $P --tokens 8192 --iters 3; done; done
log ncu
FT_PREFILL_VARIANT=wg8 timeout 100 ncu --clock-control none -k regex:attn_prefill_wg8 --launch-skip 40 --launch-count 1 \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section InstructionStats \
  --section LaunchStats --page details --print-details all $b bench --device cuda:0 --budgets resident --model $m \
  --mode prefill --tokens 8192 --iters 1 --warmup 1 >"$out/ncu-wg8.txt" 2>&1
finish
