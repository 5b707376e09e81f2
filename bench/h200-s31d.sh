#!/usr/bin/env bash
# Session 31, call d: cuBLASLt's outer-vector FP8 scales with stand-in
# scale pointers at planning (cuBLASLt 13.1 refused every shape, status 7,
# so every FP8 GEMM of a prefill ran fp8_rescale after it): TestMatMulFP8Lt
# (its log says whether the scaled GEMMs ran, and checks their results),
# the FP8 GEMM tests and models/all FP8; then FP8 against BF16 prefill
# 2,048 interleaved and a kernel table of the FP8 prefill.
# Usage (repo root, GPU machine): bash bench/h200-s31d.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=540
start_call kernels/cudabackend models/all
make_fp8
log tests
TT=120 runt kern cudabackend kernels/cudabackend 'FP8Lt|FP8GEMM|MatMulNFP8|FP8MLP|FP8Rows|QuantRows'
TT=90 runt models-fp8 all models/all 'FP8'
grep -E "outer-vector|refused" "$out/test-kern.log" | sort | uniq -c | head -8 >>"$out/summary.txt"
tests_done || { finish; exit 0; }
log prefill-2048
P2="--budgets resident --mode prefill --tokens 2048 --iters 10"
for r in a b; do
  one f8-p2k-$r -- --model $f8 $P2
  one bf-p2k-$r -- --model $m $P2
done
one f8-p2k-rescale-$r FT_FP8_GEMM_SCALES=rescale -- --model $f8 $P2
BT=120 one f8-p2k-kp -- --model $f8 --budgets resident --mode prefill --tokens 2048 --iters 3 --kernel-profile
finish
