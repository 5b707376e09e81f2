#!/usr/bin/env bash
# Session 13, call c (about 7 minutes): the library review's fixes on the GPU
# (a Model runs one forward at a time and Close waits for it; the budget
# checked against the planner's floor at Offload; nil/closed checks), the
# GPU pre-flight test on wider layers, tiny-llama's request 5 of s13b alone,
# and the resident decode figures after the forward lock (Llama-3-8B shape).
# Usage (repo root, GPU machine): bash bench/h200-s13c.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=540
compile_tests kernels/cudabackend models/all offload models/llama session
build_cuda
wait
export FT_KERNEL_CACHE=$PWD/bin/kernels
(MT=240 make_models) &
log tests
TT=120 runt fit offload offload '^TestGPUDeviceFitCard$|TestGPUUnitGraphs|TestGPUEmbedMappedGraph|TestGPULeak|TestGPUAnnouncedUnits|TestGPUEmbedHost'
TT=200 runt model all models/all "${MODEL_TESTS:-GPU$|TestFamiliesEveryDevice|TestBatchEveryDevice|TestOffloadedEqualsResident|TestHostPlacementDevice|TestFP8Checkpoints}"
TT=120 runt kern cudabackend kernels/cudabackend 'TestCapturedStep$|TestNormRoPEStoreKVGPU'
TT=120 runt llama llama models/llama 'TestConcurrentGenerateCUDA|TestDecodeGraphCUDA|TestDependentLaunchDecodeCUDA|TestResidualAccumulateCUDA'
TT=120 runt sess session session "${SESSION_TESTS:-TestFractionOnGPU|TestShardedNCCLOneGPU}"
cat "$out/tests.txt" | tee -a "$out/summary.txt"
# s13b's tiny-llama request 5 alone, greedy, against its batched results (roomy 64 MiB / preempting 400 KiB)
timeout 60 $b run-model --model testdata/tiny-llama --device cuda:0 --token-ids 37,50,63,76,89,102,115,128,141,154,167 \
  --max-new-tokens 100 --ignore-eos --json >"$out/alone5.txt" 2>"$out/alone5.log"
echo "request 5 alone: $(python3 -c "import json;print(json.load(open('$out/alone5.txt'))['generated_ids'][55:62])" 2>&1)" | tee -a "$out/summary.txt"
wait
log models-ready
D="--budgets resident --mode decode --iters 20"
one bf16-512 NOOP=1 -- --model $m $D --context 512
rmodel bf16 NOOP=1 -- --max-new-tokens 256
rmodel bf16b NOOP=1 -- --max-new-tokens 256
finish
