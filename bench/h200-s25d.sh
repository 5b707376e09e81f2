#!/usr/bin/env bash
# Session 25, call d (about 3 minutes on a fresh machine): timing
# diagnostics of the tensor-core FP8 GEMV (TestFP8GEMVRate only; their sums
# are wrong by design): xmmc loads the same bytes a block round as mmae
# with each warp load 512 contiguous bytes of one row (mmae's loads take 64
# bytes of each of 8 rows), xmmn skips the x staging, xmmcn both.
# Usage (repo root, GPU machine): bash bench/h200-s25d.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=400
compile_tests kernels/cudabackend
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
wait
log tests
TT=120 runt rate cudabackend kernels/cudabackend 'TestFP8GEMVRate'
grep -E "rate (qkv|o|down|gateup) +(bf16pipe|auto|mmae|x)" "$out/test-rate.log" | sed 's/^ *fp8gemvrate_test.go:[0-9]*: //' >>"$out/summary.txt"
tests_done
finish
