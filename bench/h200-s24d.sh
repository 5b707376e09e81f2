#!/usr/bin/env bash
# Session 24, call d (about 6 minutes on a fresh machine): variants wg1 and wg1o (wg1
# with the next tile's S during the softmax), one warpgroup a block, two
# blocks an SM (kernels/cuda/sm90a/extra/prefill_wg1.cu): its module, its
# outputs against the CPU and its packed kernel against its paged one;
# kernel tables of 64 x 512 with wg6 and wg1, 64 x 512 forwards
# interleaved, prefill 8,192 with each (issue 15).
# Usage (repo root, GPU machine): bash bench/h200-s24d.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=520
compile_tests kernels/cudabackend
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
(MT=240 make_models) &
wait
log tests
TT=150 runt wg cudabackend kernels/cudabackend 'TestPrefillWGModule|TestPrefillWG1Quick|TestVarlenContigKernels|TestPrefillVariant'
cat "$out/tests.txt" | tee -a "$out/summary.txt"
grep -h -B2 -A12 -- '--- FAIL' "$out"/test-*.log | head -40
grep -h 'wg1.*blocks of\|wg1o*:\|differ from wg6' "$out"/test-*.log | sort | uniq | head -20 | tee -a "$out/summary.txt"
grep -q -- '--- FAIL\|panic\|timed out' "$out"/test-*.log && { tail -30 "$out/compile-cudabackend.log"; finish; exit 0; }
log figures
P="--model $m --budgets resident --mode prefill --warmup 1"
for v in wg6 wg1 wg1o; do one pk-kp-$v FT_PREFILL_VARIANT=$v -- $P --batch 64 --tokens 512 --iters 1 --kernel-profile; done
for r in a b c; do for v in wg1o wg6; do one pk-$v-$r FT_PREFILL_VARIANT=$v -- $P --batch 64 --tokens 512 --iters 2; done; done
for v in wg1o wg6; do one pf-$v FT_PREFILL_VARIANT=$v -- $P --tokens 8192 --iters 3; done
finish
