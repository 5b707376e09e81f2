#!/usr/bin/env bash
# Session 25, call h (about 3 minutes on a fresh machine): the tensor-core
# FP8 GEMVs with 3 (mm3) and 6 (mm6) k-steps in flight beside mm2 and mm4:
# against the CPU reference, and their standalone rates.
# Usage (repo root, GPU machine): bash bench/h200-s25h.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=300
compile_tests kernels/cudabackend
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
wait
log tests
TT=200 runt fp8 cudabackend kernels/cudabackend 'TestFP8GEMVv|TestMatMulNFP8|TestGateUpSiLUFP8|TestFP8GEMVRate'
grep -E "rate (qkv|o|down|gateup) +(bf16pipe|auto|mm)" "$out/test-fp8.log" | sed 's/^ *fp8gemvrate_test.go:[0-9]*: //' >>"$out/summary.txt"
tests_done
finish
