#!/usr/bin/env bash
# Session 13, call b (about 8 minutes): the session's changes on the GPU.
# Tests: the fused per-head q/k RMSNorm + RoPE + KV store (kernels/cudabackend
# TestNormRoPEStoreKVGPU; models/all families, batch and fused-decode tests,
# which run Qwen3 through it), the offload pre-flight check against the
# card's free memory (offload TestGPUDeviceFitCard), the scheduler on the
# GPU with lazy KV reservation (cmd/infer TestCUDASched). Then the A/B of
# FT_QKNORM_ROPE on the qwen3-8b shape's resident decode (graph step at
# 512, run-model 256 tokens, interleaved), and `infer serve` refusing a
# budget plus KV cache over the card / starting with a budget above the model.
# Usage (repo root, GPU machine): bash bench/h200-s13b.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=560
compile_tests kernels/cudabackend models/all offload cmd/infer
build_cuda
wait
export FT_KERNEL_CACHE=$PWD/bin/kernels
q3=/tmp/qwen3-8b
(timeout 240 $b make-model --shape qwen3-8b --out $q3 >"$out/make-model-q3.txt" 2>&1) &
log tests
TT=150 runt kern cudabackend kernels/cudabackend 'TestNormRoPEStoreKVGPU|TestPairRMSNormGPU|TestRoPEStoreKV$|TestCapturedStep$|TestCheckEnvSwitch'
TT=200 runt model all models/all 'TestFamiliesEveryDevice|TestBatchEveryDevice|TestFusedDecodeSwitchesGPU|TestOffloadedEqualsResident'
TT=120 runt fit offload offload '^TestGPUDeviceFitCard$'
TT=150 runt sched infer cmd/infer 'TestCUDASched'
cat "$out/tests.txt" | tee -a "$out/summary.txt"
wait
log q3-ready
D="--budgets resident --mode decode --iters 20"
one q3-on NOOP=1 -- --model $q3 $D --context 512
one q3-off FT_QKNORM_ROPE=0 -- --model $q3 $D --context 512
m=$q3 rmodel q3-on NOOP=1 -- --max-new-tokens 256
m=$q3 rmodel q3-off FT_QKNORM_ROPE=0 -- --max-new-tokens 256
m=$q3 rmodel q3-on2 NOOP=1 -- --max-new-tokens 256
echo "run-model q3 generated ids, on vs off: $(cmp -s <(grep generated: "$out/rm-q3-on.txt") <(grep generated: "$out/rm-q3-off.txt") && echo same || echo DIFFERENT)" | tee -a "$out/summary.txt"
one q3-on-kprof NOOP=1 -- --model $q3 $D --context 512 --kernel-profile
one q3-8k NOOP=1 -- --model $q3 $D --context 8192
one q3-8k-off FT_QKNORM_ROPE=0 -- --model $q3 $D --context 8192
# serve: a budget below the model plus a KV cache over the card must be refused (naming both);
# a budget above the model with a cache that fits must start.
timeout 90 $b serve --model $q3 --device cuda:0 --gpu-budget 14GiB --kv-cache 130GiB --port 0 >"$out/serve-refuse.txt" 2>&1
echo "serve refuse rc=$?: $(tail -2 "$out/serve-refuse.txt" | cut -c1-400 | tr '\n' ' ')" | tee -a "$out/summary.txt"
timeout 60 $b serve --model $q3 --device cuda:0 --gpu-budget 130GiB --kv-cache 20GiB --port 0 >"$out/serve-start.txt" 2>&1
echo "serve start rc=$?: $(grep -m2 -iE 'listen|serving|error' "$out/serve-start.txt" | cut -c1-300 | tr '\n' ' ')" | tee -a "$out/summary.txt"
# lazy KV reservation on the GPU: a batch whose reach is over the KV cache (preempting) against one
# with room for all, same greedy tokens expected (the fixtures' batched tests assert batched = alone)
for fx in tiny-llama tiny-qwen3; do
  for kv in 400KiB 64MiB; do
    timeout 60 $b run-model --model testdata/$fx --device cuda:0 --batch-file bench/s13b-batch.jsonl --out "$out/b-$fx-$kv.txt" --kv-cache $kv >"$out/b-$fx-$kv.log" 2>&1
    echo "batch $fx $kv rc=$?: $(tail -1 "$out/b-$fx-$kv.log")" | tee -a "$out/summary.txt"
  done
  python3 -c "
import json,sys
r=lambda f: sorted((json.loads(l) for l in open(f)), key=lambda x: x['index'])
a,b=r(sys.argv[1]),r(sys.argv[2])
print('batch $fx preempting vs roomy: same generated_ids in', sum(x['generated_ids']==y['generated_ids'] for x,y in zip(a,b)), 'of', len(a))" "$out/b-$fx-400KiB.txt" "$out/b-$fx-64MiB.txt" 2>&1 | tee -a "$out/summary.txt"
done
finish
