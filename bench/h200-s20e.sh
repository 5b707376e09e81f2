#!/usr/bin/env bash
# Session 20, call e (about 5 minutes): wg6 with warpgroup 0 copying the
# next key/value tile while its wgmmas run and the row maxima as four
# chains: its tests (within a bf16 unit of wg3, the CPU reference), then
# kernel profiles of wg3 and wg6 on the same machine (prefill 8,192 and
# 64 x 512 packed) and prefill 8,192 forwards interleaved (issue 15).
# Usage (repo root, GPU machine): bash bench/h200-s20e.sh OUTDIR
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
TT=100 runt wg6 cudabackend kernels/cudabackend 'TestPrefillWG6Quick|TestVarlenContigKernels'
cat "$out/tests.txt" | tee -a "$out/summary.txt"
grep -h -B2 -A12 -- '--- FAIL' "$out"/test-*.log | head -40
grep -h 'outputs differ' "$out"/test-wg6.log | sort | uniq -c | tee -a "$out/summary.txt"
log figures
P="--model $m --budgets resident --mode prefill --warmup 1"
one pf-wg6-kp FT_PREFILL_VARIANT=wg6 -- $P --tokens 8192 --iters 1 --kernel-profile
one pf-wg3-kp FT_PREFILL_VARIANT=wg3 -- $P --tokens 8192 --iters 1 --kernel-profile
one pk-wg3-kp FT_PREFILL_VARIANT=wg3 -- $P --batch 64 --tokens 512 --iters 1 --kernel-profile
one pk-wg6-kp FT_PREFILL_VARIANT=wg6 -- $P --batch 64 --tokens 512 --iters 1 --kernel-profile
one pf-wg6-a FT_PREFILL_VARIANT=wg6 -- $P --tokens 8192 --iters 3
one pf-wg3-a FT_PREFILL_VARIANT=wg3 -- $P --tokens 8192 --iters 3
one pf-wg6-b FT_PREFILL_VARIANT=wg6 -- $P --tokens 8192 --iters 3
one pf-wg3-b FT_PREFILL_VARIANT=wg3 -- $P --tokens 8192 --iters 3
finish
