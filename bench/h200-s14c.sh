#!/usr/bin/env bash
# Session 14, call c (about 8 minutes): closing figures and tests with the
# session's defaults (the token feed and the scheduler's solo mode on):
# run-model 256 tokens on the Llama-3-8B and Qwen3-8B shapes (feed on, and
# off once for Qwen3), the scheduler with one request (solo on / off), and
# solo mode's entry after an 8,000-id prompt, and the GPU tests changed since s14b (TestArgmaxFeedRingWrap corrected, the
# solo and swap tests after the review's mends).
# Usage (repo root, GPU machine): bash bench/h200-s14c.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=540
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
compile_tests kernels/cudabackend models/generate models/decoder
q3=/tmp/qwen3-8b
(MT=240 make_models) &
timeout 240 $b make-model --shape qwen3-8b --out $q3 >"$out/make-model-q3.txt" 2>&1
sed -i 's/"max_position_embeddings": [0-9]*/"max_position_embeddings": 40960/' $q3/config.json
wait
log ready
TT=60 runt feed cudabackend kernels/cudabackend 'TestArgmaxFeed'
TT=120 runt gen generate models/generate 'TestSchedulerSoloGraphCUDA|TestSchedulerSwapBatchCUDA'
TT=90 runt fedgen decoder models/decoder 'TestAsyncDecodeGPU|TestGenerateFed'
sched() { # tag env...
  local tag=$1; shift
  env "$@" timeout 90 $b run-model --model $m --device cuda:0 --batch-file bench/s14-one.jsonl --out "$out/sched-$tag.jsonl" >"$out/sched-$tag.txt" 2>&1
  echo "sched $tag rc=$?: $(tail -1 "$out/sched-$tag.txt")" | tee -a "$out/summary.txt"
}
rmodel llama-1 NOOP=1 -- --max-new-tokens 256
sched solo NOOP=1
sched eager FT_SCHED_GRAPH=0
rmodel llama-2 NOOP=1 -- --max-new-tokens 256
# solo mode's entry at a long context (review14-solo finding 1): one request of 8,000 prompt ids and
# 128 new tokens, solo on / off / on; the first decode step pays the entry (KV copy and capture)
python3 -c "import json; print(json.dumps({'token_ids': list(range(100, 8100)), 'max_new_tokens': 128, 'ignore_eos': True}))" >/tmp/s14-long.jsonl
schedlong() { # tag env...
  local tag=$1; shift
  env "$@" timeout 90 $b run-model --model $m --device cuda:0 --batch-file /tmp/s14-long.jsonl --out "$out/long-$tag.jsonl" >"$out/long-$tag.txt" 2>&1
  echo "long $tag rc=$?: $(tail -1 "$out/long-$tag.txt")" | tee -a "$out/summary.txt"
}
schedlong solo NOOP=1
schedlong eager FT_SCHED_GRAPH=0
schedlong solo2 NOOP=1
m=$q3 rmodel q3-1 NOOP=1 -- --max-new-tokens 256
m=$q3 rmodel q3-sync FT_ASYNC_DECODE=0 -- --max-new-tokens 256
m=$q3 rmodel q3-2 NOOP=1 -- --max-new-tokens 256
finish
