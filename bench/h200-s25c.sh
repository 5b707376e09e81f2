#!/usr/bin/env bash
# Session 25, call c (about 5 minutes on a fresh machine): the tensor-core
# FP8 GEMVs with fewer registers and more blocks an SM (s25b: mmae ran at
# 106 registers, 2 blocks an SM, 25% occupancy, warps stalled on their
# loads): m2e3, m2e4, m4e3 against the CPU reference, their standalone
# rates (TestFP8GEMVRate) and the resident FP8 decode step at 512.
# Usage (repo root, GPU machine): bash bench/h200-s25c.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=540
f8=/tmp/llama3-8b-fp8
start_call kernels/cudabackend
(timeout 240 $b make-model --shape llama3-8b --dtype fp8-channel --out $f8 >"$out/make-model-fp8.txt" 2>&1) &
log tests
TT=150 runt fp8 cudabackend kernels/cudabackend 'TestFP8GEMVv|TestMatMulNFP8|TestGateUpSiLUFP8'
TT=120 runt rate cudabackend kernels/cudabackend 'TestFP8GEMVRate'
grep -E "rate (qkv|o|down|gateup) +(bf16pipe|auto|p4s|u4r1s|u4r2s|u8r1g|m)" "$out/test-rate.log" | sed 's/^ *fp8gemvrate_test.go:[0-9]*: //' >>"$out/summary.txt"
tests_done
wait
log figures
R="--budgets resident --mode decode --context 512 --iters 20"
for r in a b; do for v in auto mmae m2e3 m2e4 m4e3; do one f8-$v-$r FT_FP8_VARIANT=$v -- --model $f8 $R; done; done
finish
