#!/usr/bin/env bash
# Session 25, call i (about 5 minutes on a fresh machine): the session's last
# commit on the GPU: go vet -tags cuda of the changed packages, the FP8
# tests of the backend, the models' GPU, batch, golden and FP8 tests, the
# --stream-dtype fp8 command test, and the resident FP8 decode step once.
# Usage (repo root, GPU machine): bash bench/h200-s25i.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=330
f8=/tmp/llama3-8b-fp8
compile_tests kernels/cudabackend models/all cmd/infer
(test_env; timeout 200 go vet -tags cuda ./kernels/cudabackend/ ./models/all/ >"$out/vet.log" 2>&1; echo "vet rc=$?" >>"$out/summary.txt") &
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
(timeout 240 $b make-model --shape llama3-8b --dtype fp8-channel --out $f8 >"$out/make-model-fp8.txt" 2>&1) &
wait
log tests
TT=120 runt fp8 cudabackend kernels/cudabackend 'FP8|TestCapturedStep'
TT=200 runt models all models/all 'GPU|FP8|TestBatch|TestGolden|TestTrained'
TT=100 runt infer infer cmd/infer 'StreamDType|FP8'
tests_done
log figures
one f8-auto NOOP=1 -- --model $f8 --budgets resident --mode decode --context 512 --iters 20
finish
