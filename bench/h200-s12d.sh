#!/usr/bin/env bash
# Session 12, call d (about 5 minutes): after the removal of FT_ATTN_OPROJ
# and the bulk-copy decode variants (2a7a51c), the decode attention's GPU
# tests over every remaining variant and the switch parsing; then the
# session's closing decode figures with the committed defaults: the resident
# BF16 step at 512 with its kernel table, run-model 256 tokens, the step at
# 8,192, and the resident FP8 step at 512 (issue 18, not measured since s8e).
# Usage (repo root, GPU machine): bash bench/h200-s12d.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=540
compile_tests kernels/cudabackend
build_cuda
wait
export FT_KERNEL_CACHE=$PWD/bin/kernels
f8=/tmp/llama3-8b-fp8
(MT=240 make_models; timeout 200 $b make-model --shape llama3-8b --dtype fp8-channel --out $f8 >"$out/make-model-fp8.txt" 2>&1) &
log tests
TT=150 runt kern cudabackend kernels/cudabackend 'TestDecodeMMA$|DecodePipePositions|DecodePipeCapturedStep|TestCheckEnvSwitch'
cat "$out/tests.txt" | tee -a "$out/summary.txt"
wait
log models-ready
D="--budgets resident --mode decode --iters 20"
one bf16-512 NOOP=1 -- --model $m $D --context 512
rmodel bf16 NOOP=1 -- --max-new-tokens 256
one bf16-512-kprof NOOP=1 -- --model $m $D --context 512 --kernel-profile
one bf16-8k NOOP=1 -- --model $m $D --context 8192
one fp8-512 NOOP=1 -- --model $f8 $D --context 512
rmodel bf16b NOOP=1 -- --max-new-tokens 256
one fp8-512b NOOP=1 -- --model $f8 $D --context 512
finish
