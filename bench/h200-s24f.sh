#!/usr/bin/env bash
# Session 24, call f (about 5 minutes on a fresh machine): the GPU tests of
# the code session 23's last commit (47dcd06, uploadRoPEPairs) changed
# without a GPU run: the batched RoPE + store and the fused q/k/v op against
# their references, the fused gate/up GEMM, and the models' GPU, batch and
# golden tests over the fixtures.
# Usage (repo root, GPU machine): bash bench/h200-s24f.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=400
compile_tests kernels/cudabackend models/all
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
wait
log tests
TT=150 runt rope cudabackend kernels/cudabackend 'TestRoPE|TestProjectRoPE|TestNormRoPE|TestGateUpSiLUFusedGPU|TestVarlenContigKernels'
TT=200 runt models all models/all 'GPU|TestBatch|TestGolden'
cat "$out/tests.txt" | tee -a "$out/summary.txt"
grep -h -B2 -A12 -- '--- FAIL' "$out"/test-*.log | head -40 | tee -a "$out/summary.txt"
finish
