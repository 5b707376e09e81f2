#!/usr/bin/env bash
# Session 26, call g (about 3 minutes on a fresh machine): the tensor-core
# FP8 GEMVs after the fix of s26f's NaN (a zero piece past K read the
# scale after a matrix's last): the kernels' tests against the CPU
# reference, folded-norm twins included.
# Usage (repo root, GPU machine): bash bench/h200-s26g.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=230
log compile
compile_tests kernels/cudabackend
wait
log tests
TT=60 runt fp8 cudabackend kernels/cudabackend 'TestNormMatMulNFP8|TestNormGateUpSiLUFP8|TestMatMulNFP8|TestGateUpSiLUFP8|TestFP8GEMVv'
tests_done
finish
