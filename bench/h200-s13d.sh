#!/usr/bin/env bash
# Session 13, call d (about 4 minutes): GPU tests after the last review's
# mends (a fractional budget checked against the card's free memory; the
# decode graph's Close under the model's forward lock; the fused q/k norm's
# reference shared with the q/k/v one).
# Usage (repo root, GPU machine): bash bench/h200-s13d.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
compile_tests kernels/cudabackend models/all offload models/llama session
build_cuda
wait
export FT_KERNEL_CACHE=$PWD/bin/kernels
log tests
TT=120 runt fit offload offload '^TestGPUDeviceFitCard$|TestGPUUnitGraphs|TestGPUEmbedMappedGraph|TestGPULeak|TestGPUAnnouncedUnits|TestGPUEmbedHost'
TT=200 runt model all models/all 'GPU$|TestFamiliesEveryDevice|TestBatchEveryDevice|TestOffloadedEqualsResident|TestHostPlacementDevice|TestFP8Checkpoints'
TT=120 runt kern cudabackend kernels/cudabackend 'TestCapturedStep$|TestNormRoPEStoreKVGPU'
TT=120 runt llama llama models/llama 'TestConcurrentGenerateCUDA|TestDecodeGraphCUDA|TestDependentLaunchDecodeCUDA|TestResidualAccumulateCUDA'
TT=120 runt sess session session 'TestFractionOnGPU|TestShardedNCCLOneGPU'
cat "$out/tests.txt" | tee -a "$out/summary.txt"
finish
