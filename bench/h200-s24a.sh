#!/usr/bin/env bash
# Session 24, call a (about 6 minutes on a fresh machine): variant wg6p, wg6
# with L2 prefetches of the next wave's query rows and first key/value
# tiles (kernels/cuda/sm90a/extra/prefill_wg6p.cu): its module loads, its
# outputs are wg6's bit for bit; kernel tables of 64 x 512 with each, then
# 64 x 512 and prefill 8,192 forwards interleaved (issue 15).
# Usage (repo root, GPU machine): bash bench/h200-s24a.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=500
compile_tests kernels/cudabackend
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
(MT=240 make_models) &
wait
log tests
TT=150 runt wg cudabackend kernels/cudabackend 'TestPrefillWGModule|TestPrefillWG6PQuick|TestPrefillWG6Quick|TestVarlenContigKernels|TestPrefillVariant'
cat "$out/tests.txt" | tee -a "$out/summary.txt"
grep -h -B2 -A12 -- '--- FAIL' "$out"/test-*.log | head -40
grep -h 'wg6p.*blocks of\|differ from wg6' "$out"/test-*.log | head -20 | tee -a "$out/summary.txt"
grep -q -- '--- FAIL\|panic\|timed out' "$out"/test-*.log && { finish; exit 0; }
log figures
P="--model $m --budgets resident --mode prefill --warmup 1"
for v in wg6 wg6p; do one pk-kp-$v FT_PREFILL_VARIANT=$v -- $P --batch 64 --tokens 512 --iters 1 --kernel-profile; done
for r in a b c; do for v in wg6 wg6p; do one pk-$v-$r FT_PREFILL_VARIANT=$v -- $P --batch 64 --tokens 512 --iters 2; done; done
for r in a b; do for v in wg6 wg6p; do one pf-$v-$r FT_PREFILL_VARIANT=$v -- $P --tokens 8192 --iters 3; done; done
finish
