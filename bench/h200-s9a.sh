#!/usr/bin/env bash
# Session 9, call a (about 9 minutes): the session's GPU tests and the first
# measurements.
#   - tests: TestL2BranchDecodeGPU (FT_L2_BRANCH against off, bit for bit),
#     the models/all decode A/B tests on their new shared helper (decodeAB),
#     TestCUDASched, TestBenchHostDRAMProbeCUDA;
#   - A/B, interleaved: FT_L2_BRANCH (o, qkv, gu, all) against off on the
#     resident BF16 and FP8 decode step at 512;
#   - the DRAM-sharing probe: host reads and H2D copies alone and together,
#     a host layer beside the copies.
# Usage (repo root, GPU machine): bash bench/h200-s9a.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=540
compile_tests models/all runtime/cuda cmd/infer
build_cuda
wait
make_models
f8=/tmp/llama3-8b-fp8
[ -d $f8 ] || timeout 150 $b make-model --shape llama3-8b --dtype fp8-channel --out $f8 >"$out/make-model-fp8.txt" 2>&1
export FT_KERNEL_CACHE=$PWD/bin/kernels
log tests
TT=90 runt dec all models/all 'TestL2BranchDecodeGPU|TestGEMVBalDecodeGPU|TestGEMVMixedDecodeGPU|TestFusedRoPEDecodeGPU|TestFusedDecodeSwitchesGPU|TestFP8AddDecodeGPU|TestNormTailDecodeGPU'
TT=40 runt sched cuda runtime/cuda 'TestCUDASched'
TT=60 runt probe infer cmd/infer 'TestBenchHostDRAMProbeCUDA'
cat "$out/tests.txt"
log ab
F="--budgets resident --mode decode --context 512 --iters 20"
one bf-off NOOP=1 -- --model $m $F
one bf-all FT_L2_BRANCH=all -- --model $m $F
one bf-o FT_L2_BRANCH=o -- --model $m $F
one bf-qkv FT_L2_BRANCH=qkv -- --model $m $F
one bf-gu FT_L2_BRANCH=gu -- --model $m $F
one bf-off-b NOOP=1 -- --model $m $F
one f8-off NOOP=1 -- --model $f8 $F
one f8-all FT_L2_BRANCH=all -- --model $f8 $F
one f8-o FT_L2_BRANCH=o -- --model $f8 $F
one bf-all-line FT_L2_BRANCH=all FT_L2_BRANCH_MODE=line -- --model $m $F
one bf-o32 FT_L2_BRANCH=o FT_L2_BRANCH_MIB=32 -- --model $m $F
left 470 && { log probe; timeout 70 $b bench-host --copy-device cuda:0 --threads 16 --layer --layer-count 8 --layer-iters 30 >"$out/probe16.txt" 2>&1; tail -15 "$out/probe16.txt" | tee -a "$out/summary.txt"; }
cat "$out/tests.txt"
finish
