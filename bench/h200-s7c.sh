#!/usr/bin/env bash
# The seventh 2026-12-01 session's test and A/B call (about 8 minutes): GPU
# tests of the session's kernels (wg5 prefill attention, the FP8 GEMVs that
# add into the residual, the software-pipelined FP8 and BF16 GEMVs, the
# shared-read host planner's device tests), then A/B on the resident decode
# step: FP8 (FT_FP8_ADD, u8r1sp, u4r1sp) and BF16 (FT_GEMV=pipe, pipe8),
# defaults interleaved. bench/h200-s7d.sh follows on the same machine.
# Usage (repo root, GPU machine): bash bench/h200-s7c.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=560
f8=/tmp/llama3-8b-fp8
build_cuda
git rev-parse --short HEAD >"$out/commit.txt" 2>/dev/null
log kernels-wg5
FT_PREFILL_VARIANT=wg5 timeout 90 $b kernels --out bin/kernels >"$out/kernels-wg5.txt" 2>&1; echo "wg5 module rc=$?" >>"$out/steps.log"
compile_tests kernels/cudabackend models/all
log make-models
make_models
[ -d $f8 ] || timeout 90 $b make-model --shape llama3-8b --dtype fp8-channel --out $f8 >"$out/make-fp8.txt" 2>&1
wait
export FT_KERNEL_CACHE=$PWD/bin/kernels
log tests
TT=200 runt cb kernels/cudabackend 'TestPrefillWG5Quick|TestPrefillWGModule|TestPrefillVariantOccupancy|(TestPrefillAttentionKernels|TestVarlenPrefillKernels)/.*/^wg5$|TestFP8PipeBitIdentical|TestGEMVPipeBitIdentical|TestMatMulAddFP8|TestParseFP8Add|TestFP8GEMVv|TestGateUpSiLUFP8|TestMatMulNFP8' &
TT=200 runt all models/all 'TestFP8AddDecodeGPU|TestFP8Checkpoints|TestHostPlacementDevice|TestHostMeasuredReplan|TestHostPlacementTiming|TestFusedDecodeSwitchesGPU' &
wait
cat "$out/tests.txt"; grep -h -B2 -A8 -E '^\s*--- FAIL|panic' "$out"/test-*.log | grep -v -- '--- PASS' | head -40
log ab
R="--budgets resident"; BT=60
F="$R --model $f8 --mode decode --context 512 --iters 20"
D="$R --model $m --mode decode --context 512 --iters 20"
one f8 NOOP=1 -- $F
one f8-noadd FT_FP8_ADD=0 -- $F
one f8-u8r1sp FT_FP8_VARIANT=u8r1sp -- $F
one f8-u4r1sp FT_FP8_VARIANT=u4r1sp -- $F
one f8-b NOOP=1 -- $F
one d512 NOOP=1 -- $D
one d512-pipe FT_GEMV=pipe -- $D
one d512-pipe8 FT_GEMV=pipe8 -- $D
one d512-b NOOP=1 -- $D
one d512-pipe-b FT_GEMV=pipe -- $D
one f8-u4r1sp-prof FT_FP8_VARIANT=u4r1sp -- $F --kernel-profile
one d512-pipe-prof FT_GEMV=pipe -- $D --kernel-profile
finish
