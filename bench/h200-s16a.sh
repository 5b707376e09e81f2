#!/usr/bin/env bash
# Session 16, call a (about 9 minutes): the GPU tests of the changes since
# s15e (TestGEMVPipeBitIdentical with the L2-prefetching twins and the
# corrected kernel-choice checks, qknorm_rope_store without its wide-head
# fallback, Scheduler.Close in solo mode), then run-model A/B of the
# early-copy decode attention (FT_DECODE_VARIANT=s3w4h1tp) and the L2
# prefetch twins (FT_GEMV_L2PF) against the defaults, Llama-3-8B and
# Qwen3-8B shapes, interleaved.
# Usage (repo root, GPU machine): bash bench/h200-s16a.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=560
compile_tests kernels/cudabackend models/generate
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
q3=/tmp/qwen3-8b
(MT=240 make_models) &
(timeout 240 $b make-model --shape qwen3-8b --out $q3 >"$out/make-model-q3.txt" 2>&1) &
wait
log tests
TT=150 runt kern cudabackend kernels/cudabackend 'TestGEMVPipeBitIdentical|TestNormRoPEStoreKVGPU' &
TT=100 runt gen generate models/generate 'TestSchedulerSoloGraphCUDA|TestSchedulerClose' &
wait
cat "$out/tests.txt" | tee -a "$out/summary.txt"
grep -h -B2 -A12 -- '--- FAIL' "$out"/test-*.log | head -40
log figures
R="-- --max-new-tokens 256"
rmodel d1 NOOP=1 $R
rmodel a6 FT_GEMV_L2PF=acc6k $R
rmodel tp1 FT_DECODE_VARIANT=s3w4h1tp $R
rmodel l6 FT_GEMV_L2PF=6k $R
rmodel d2 NOOP=1 $R
rmodel a16 FT_GEMV_L2PF=acc16k $R
rmodel l16 FT_GEMV_L2PF=16k $R
rmodel tp2 FT_DECODE_VARIANT=s3w4h1tp $R
rmodel d3 NOOP=1 $R
rmodel a6b FT_GEMV_L2PF=acc6k $R
rmodel tpa6 FT_DECODE_VARIANT=s3w4h1tp FT_GEMV_L2PF=acc6k $R
m=$q3 rmodel q3-d1 NOOP=1 $R
m=$q3 rmodel q3-a6 FT_GEMV_L2PF=acc6k $R
m=$q3 rmodel q3-tp FT_DECODE_VARIANT=s3w4h1tp $R
m=$q3 rmodel q3-l16 FT_GEMV_L2PF=16k $R
m=$q3 rmodel q3-d2 NOOP=1 $R
m=$q3 rmodel q3-a16 FT_GEMV_L2PF=acc16k $R
finish
