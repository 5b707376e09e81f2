#!/usr/bin/env bash
# Session 22, call b (about 5 minutes): variant wg9 (wg6 with
# FlashAttention-3's warp specialization: a producer warpgroup, mbarriers,
# setmaxnreg; 40/232 registers over the paged pool after s22a found 24
# spilling there): its tests (wg6's outputs bit for bit, registers and local
# memory logged), kernel tables of wg9 and wg6 at prefill 8,192 and
# 64 x 512 packed, forwards interleaved (issue 15).
# Usage (repo root, GPU machine): bash bench/h200-s22b.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=270
compile_tests kernels/cudabackend
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
(MT=240 make_models) &
wait
git rev-parse --short HEAD >"$out/commit.txt" 2>/dev/null
log tests
TT=150 runt wg9 cudabackend kernels/cudabackend 'TestPrefillWGModule|TestPrefillWG6Quick|TestPrefillWG9Quick|TestVarlenContigKernels'
cat "$out/tests.txt" | tee -a "$out/summary.txt"
grep -h -B2 -A12 -- '--- FAIL' "$out"/test-*.log | head -40
grep -h 'registers\|differ from' "$out"/test-wg9.log | sort | uniq | head -30 | tee -a "$out/summary.txt"
grep -q 'same order)\|panic\|timed out' "$out/test-wg9.log" && { finish; exit 0; }
log figures
P="--model $m --budgets resident --mode prefill --warmup 1"
one pf-wg9-kp FT_PREFILL_VARIANT=wg9 -- $P --tokens 8192 --iters 1 --kernel-profile
one pf-wg6-kp FT_PREFILL_VARIANT=wg6 -- $P --tokens 8192 --iters 1 --kernel-profile
one pk-wg9-kp FT_PREFILL_VARIANT=wg9 -- $P --batch 64 --tokens 512 --iters 1 --kernel-profile
one pk-wg6-kp FT_PREFILL_VARIANT=wg6 -- $P --batch 64 --tokens 512 --iters 1 --kernel-profile
for r in a b; do for v in wg9 wg6; do one pf-$v-$r FT_PREFILL_VARIANT=$v -- $P --tokens 8192 --iters 3; done; done
left 230 && for v in wg9 wg6; do one pk-$v FT_PREFILL_VARIANT=$v -- $P --batch 64 --tokens 512 --iters 2; done
finish
