#!/usr/bin/env bash
# Session 14, call d (about 5 minutes): GPU tests after the last changes
# (the growing solo cache's test corrected; solo mode, the token feed and
# swap with the session's defaults across the model GPU sets).
# Usage (repo root, GPU machine): bash bench/h200-s14d.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=400
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
compile_tests models/generate models/all models/llama
wait
log ready
TT=120 runt gen generate models/generate 'TestSchedulerSoloGraphCUDA|TestSchedulerSwapBatchCUDA'
TT=120 runt llama llama models/llama 'TestConcurrentGenerateCUDA|TestDecodeGraphCUDA'
TT=200 runt model all models/all 'GPU$|TestFamiliesEveryDevice|TestBatchEveryDevice|TestOffloadedEqualsResident'
finish
