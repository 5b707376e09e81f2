#!/usr/bin/env bash
# Session 11, call c (a few minutes): where the one-kernel decode layer's
# time goes (TestDecodeMegaPhases: a timer read at each phase boundary of
# every block), its per-layer time, and the models-level test.
# Usage (repo root, GPU machine): bash bench/h200-s11c.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=400
compile_tests kernels/cudabackend models/all
wait
export FT_KERNEL_CACHE=$PWD/bin/kernels
log tests
TT=200 runt mega cudabackend kernels/cudabackend 'TestDecodeMegaPhases|TestDecodeMegaTime'
grep -E "decode layer|^  " "$out/test-mega.log" | tee -a "$out/summary.txt"
TT=120 runt mega-model all models/all 'TestDecodeMegaModelGPU'
cat "$out/tests.txt" | tee -a "$out/summary.txt"
finish
