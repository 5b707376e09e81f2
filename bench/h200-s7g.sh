#!/usr/bin/env bash
# The seventh 2026-12-01 session's last call (about 3 minutes): GPU tests
# after the removal of the slower experiments (c3488e2), the width-0 guard
# of the pipelined GEMVs and the review's fixes: the default prefill
# attention module, the pipelined GEMVs' bits, every remaining FP8 GEMV
# variant with and without the residual add, and the decode paths end to end.
# Usage (repo root, GPU machine): bash bench/h200-s7g.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
compile_tests kernels/cudabackend models/all
build_cuda
wait
export FT_KERNEL_CACHE=$PWD/bin/kernels
log tests
TT=100 runt cb cudabackend kernels/cudabackend 'TestPrefillWGModule|TestPrefillWG3Quick|TestGEMVPipeBitIdentical|TestFP8GEMVv|TestMatMulNFP8|TestGateUpSiLUFP8|TestMatMulAddFP8GEMV|TestMatMulAddFP8Choice|TestCapturedStep' &
TT=100 runt all all models/all 'TestFusedDecodeSwitchesGPU|TestFP8AddDecodeGPU|TestHostPlacementDevice|TestFamiliesEveryDevice' &
wait
cat "$out/tests.txt"; grep -h -B2 -A8 -E '^\s*--- FAIL|panic' "$out"/test-*.log | grep -v -- '--- PASS' | head -40
finish
