#!/usr/bin/env bash
# Session 17, call a (about 6 minutes): the first GPU run of the q/k/v GEMV
# with the q/k norms, RoPE and KV store inside (FT_FUSE_QKNORM=1,
# kernels/cuda/qkvnorm.cu): its bit test against the separate launches and
# its graph replays, the families end to end with it on, then run-model
# Qwen3-8B A/B against the s16 defaults (three pairs); then the capped
# GEMV grids (FT_GEMV_BLOCKS=2, 3) against the default on Llama-3-8B.
# Usage (repo root, GPU machine): bash bench/h200-s17a.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=520
compile_tests kernels/cudabackend models/all
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
q3=/tmp/qwen3-8b
(timeout 240 $b make-model --shape qwen3-8b --out $q3 >"$out/make-model-q3.txt" 2>&1) &
(MT=240 make_models) &
wait
log tests
TT=150 runt kern cudabackend kernels/cudabackend 'TestProjectNormRoPEGPU|TestNormRoPEStoreKVGPU|TestProjectRoPEStoreKVGPU|TestGEMVPipeBitIdentical' &
(export FT_FUSE_QKNORM=1; TT=150 runt all all models/all 'GPU$|TestFusedDecodeSwitchesGPU') &
wait
cat "$out/tests.txt" | tee -a "$out/summary.txt"
grep -h -B2 -A12 -- '--- FAIL' "$out"/test-*.log | head -40
log figures
R="-- --max-new-tokens 256"
m=$q3 rmodel q3-d1 NOOP=1 $R
m=$q3 rmodel q3-f1 FT_FUSE_QKNORM=1 $R
m=$q3 rmodel q3-d2 NOOP=1 $R
m=$q3 rmodel q3-f2 FT_FUSE_QKNORM=1 $R
m=$q3 rmodel q3-d3 NOOP=1 $R
m=$q3 rmodel q3-f3 FT_FUSE_QKNORM=1 $R
rmodel d1 NOOP=1 $R
rmodel b2a FT_GEMV_BLOCKS=2 $R
rmodel b3a FT_GEMV_BLOCKS=3 $R
rmodel d2 NOOP=1 $R
rmodel b2b FT_GEMV_BLOCKS=2 $R
rmodel b3b FT_GEMV_BLOCKS=3 $R
BT=90 one q3-kprof FT_FUSE_QKNORM=1 -- --model $q3 --budgets resident --mode decode --iters 10 --context 512 --kernel-profile
finish
