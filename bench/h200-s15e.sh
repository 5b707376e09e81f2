#!/usr/bin/env bash
# Session 15, call e (about 3 minutes, the session's last device time): the
# GPU tests of the changes after s15c: the fed decode loop after the
# review's merge of its rerun paths, the corrected TestGEMVPipeBitIdentical,
# the decode-attention variants with the new s3w4h1tp and s2w4h1tp (early
# copies) in every mode, the scheduler's solo mode with Scheduler.Close.
# Usage (repo root, GPU machine): bash bench/h200-s15e.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
compile_tests kernels/cudabackend models/decoder models/generate
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
wait
log tests
TT=120 runt kern cudabackend kernels/cudabackend 'TestGEMVPipeBitIdentical|TestDecodeMMA|TestDecodePipePositions|TestDecodePipeCapturedStep' &
TT=100 runt dec decoder models/decoder 'TestAsyncDecodeGPU|TestGenerateFed' &
TT=100 runt gen generate models/generate 'TestSchedulerSoloGraphCUDA|TestSchedulerClose' &
wait
cat "$out/tests.txt" | tee -a "$out/summary.txt"
grep -h -B2 -A12 -- '--- FAIL' "$out"/test-*.log | head -60
finish
