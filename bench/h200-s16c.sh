#!/usr/bin/env bash
# Session 16, call c (about 8 minutes): the GPU tests of qknorm_rope_store's
# one-warp path (angles before the wait, partners by shuffle) and of the
# graph-vs-eager checks, then run-model A/B: Qwen3-8B with the new kernel
# against FT_QKNORM_EARLY=0 (the s15 kernel) and FT_GEMV=pipe (q/k/v on the
# pipelined early twin too), Llama-3-8B default against FT_GEMV=pipe.
# Usage (repo root, GPU machine): bash bench/h200-s16c.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=545
compile_tests kernels/cudabackend models/all
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
q3=/tmp/qwen3-8b
(MT=240 make_models) &
(timeout 240 $b make-model --shape qwen3-8b --out $q3 >"$out/make-model-q3.txt" 2>&1) &
wait
log tests
TT=150 runt kern cudabackend kernels/cudabackend 'TestNormRoPEStoreKVGPU|TestGEMVPipeBitIdentical|TestCapturedStep|TestDecodeMegaLayer|TestDecodePipePositions' &
TT=150 runt all all models/all 'GPU$|TestFusedDecodeSwitchesGPU' &
wait
cat "$out/tests.txt" | tee -a "$out/summary.txt"
grep -h -B2 -A12 -- '--- FAIL' "$out"/test-*.log | head -40
log figures
R="-- --max-new-tokens 256"
m=$q3 rmodel q3-d1 NOOP=1 $R
m=$q3 rmodel q3-late1 FT_QKNORM_EARLY=0 $R
m=$q3 rmodel q3-pipe1 FT_GEMV=pipe $R
m=$q3 rmodel q3-d2 NOOP=1 $R
m=$q3 rmodel q3-late2 FT_QKNORM_EARLY=0 $R
m=$q3 rmodel q3-pipe2 FT_GEMV=pipe $R
m=$q3 rmodel q3-d3 NOOP=1 $R
m=$q3 rmodel q3-pipe3 FT_GEMV=pipe $R
rmodel d1 NOOP=1 $R
rmodel pipe1 FT_GEMV=pipe $R
rmodel d2 NOOP=1 $R
rmodel pipe2 FT_GEMV=pipe $R
rmodel d3 NOOP=1 $R
rmodel pipe3 FT_GEMV=pipe $R
finish
