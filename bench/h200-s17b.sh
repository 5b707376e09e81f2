#!/usr/bin/env bash
# Session 17, call b (about 6 minutes): the FP8 GEMVs' early twins
# (FT_FP8_VARIANT=auto-early: u4r2se, u8r1ge, u4r1se) tested bit for bit
# against every variant, then issue 18's resident FP8 decode step (graph
# replayed, context 512) with auto against auto-early, interleaved, and the
# BF16 step for reference.
# Usage (repo root, GPU machine): bash bench/h200-s17b.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=520
compile_tests kernels/cudabackend
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
f8=/tmp/llama3-8b-fp8
(MT=240 make_models; timeout 200 $b make-model --shape llama3-8b --dtype fp8-channel --out $f8 >"$out/make-model-fp8.txt" 2>&1) &
wait
log tests
TT=200 runt fp8 cudabackend kernels/cudabackend 'TestFP8GEMVv|TestMatMulNFP8|TestGateUpSiLUFP8'
cat "$out/tests.txt" | tee -a "$out/summary.txt"
grep -h -B2 -A12 -- '--- FAIL' "$out"/test-*.log | head -40
log figures
D="--budgets resident --mode decode --iters 20"
one fp8-a1 NOOP=1 -- --model $f8 $D --context 512
one fp8-e1 FT_FP8_VARIANT=auto-early -- --model $f8 $D --context 512
one fp8-a2 NOOP=1 -- --model $f8 $D --context 512
one fp8-e2 FT_FP8_VARIANT=auto-early -- --model $f8 $D --context 512
one fp8-a3 NOOP=1 -- --model $f8 $D --context 512
one fp8-e3 FT_FP8_VARIANT=auto-early -- --model $f8 $D --context 512
one bf16-512 NOOP=1 -- --model $m $D --context 512
finish
