#!/usr/bin/env bash
# Session 21, call e (about 4 minutes): the session's final tree (wg6 with
# its max chains started from data and its kernels over templated bodies):
# the prefill attention tests, then prefill 8,192 (kernel table and three
# forwards) and the 64 x 512 packed step (issue 15).
# Usage (repo root, GPU machine): bash bench/h200-s21e.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=330
compile_tests kernels/cudabackend
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
(MT=240 make_models) &
wait
git rev-parse --short HEAD >"$out/commit.txt" 2>/dev/null
log tests
TT=150 runt final cudabackend kernels/cudabackend 'TestPrefillWG6Quick|TestVarlenContigKernels|TestPrefillWGModule|TestPrefillAttentionKernels|TestVarlenPrefillKernels|TestPrefillVariantOccupancy|TestChoosePrefillVariant'
cat "$out/tests.txt" | tee -a "$out/summary.txt"
grep -h -B2 -A12 -- '--- FAIL' "$out"/test-*.log | head -40
grep -h 'differ from' "$out"/test-final.log | sort | uniq -c | head -20 | tee -a "$out/summary.txt"
log figures
P="--model $m --budgets resident --mode prefill --warmup 1"
one pf-kp X=1 -- $P --tokens 8192 --iters 1 --kernel-profile
for r in a b c; do one pf-$r X=1 -- $P --tokens 8192 --iters 3; done
one pk-kp X=1 -- $P --batch 64 --tokens 512 --iters 1 --kernel-profile
one pk X=1 -- $P --batch 64 --tokens 512 --iters 2
finish
