#!/usr/bin/env bash
# Session 14, call b (about 9 minutes): the scheduler's solo mode (one request
# decoding alone replays a captured DecodeGraph over a contiguous copy of its
# KV; FT_SCHED_GRAPH) against its eager paged steps, Llama-3-8B shape
# resident, one request of 256 greedy tokens through run-model --batch-file
# (bench/s14-one.jsonl: run-model's 12 ids); GPU tests of solo mode, of the
# swap test as corrected after s14a, of the CUDA device after Close, of
# concurrent Generates with the token feed on by default, the feed after the
# review's fixes (ring harvest, argmax_rows on the shared reduction), and the
# models/all GPU set; run-model with the feed on and off after those fixes.
# Usage (repo root, GPU machine): bash bench/h200-s14b.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=560
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
compile_tests kernels/cudabackend models/generate models/all models/llama runtime/cuda models/decoder
(MT=200 make_models) &
wait
log ready
sched() { # tag env...
  local tag=$1; shift
  env "$@" timeout 90 $b run-model --model $m --device cuda:0 --batch-file bench/s14-one.jsonl --out "$out/sched-$tag.jsonl" >"$out/sched-$tag.txt" 2>&1
  echo "sched $tag rc=$?: $(tail -1 "$out/sched-$tag.txt")" | tee -a "$out/summary.txt"
}
for i in 1 2; do
  sched eager-$i FT_SCHED_GRAPH=0
  sched graph-$i FT_SCHED_GRAPH=1
done
python3 -c "
import json,sys
a,b=[json.loads(open(f).readline()) for f in sys.argv[1:3]]
print('sched eager vs graph: same generated_ids', a['generated_ids']==b['generated_ids'])" "$out/sched-eager-1.jsonl" "$out/sched-graph-1.jsonl" 2>&1 | tee -a "$out/summary.txt"
rmodel default NOOP=1 -- --max-new-tokens 256
rmodel async0 FT_ASYNC_DECODE=0 -- --max-new-tokens 256
rmodel default2 NOOP=1 -- --max-new-tokens 256
TT=150 runt gen generate models/generate 'TestSchedulerSwapBatchCUDA|TestSchedulerSoloGraphCUDA'
TT=60 runt closed cuda runtime/cuda '^TestClosedDeviceErrDeviceClosed$'
TT=120 runt llama llama models/llama 'TestConcurrentGenerateCUDA|TestDecodeGraphCUDA|TestDependentLaunchDecodeCUDA'
TT=60 runt feed cudabackend kernels/cudabackend 'TestArgmaxFeed'
TT=90 runt fedgen decoder models/decoder 'TestAsyncDecodeGPU|TestGenerateFed'
TT=200 runt model all models/all 'GPU$|TestFamiliesEveryDevice|TestBatchEveryDevice|TestOffloadedEqualsResident|TestFP8Checkpoints'
finish
