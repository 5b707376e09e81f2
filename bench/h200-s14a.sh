#!/usr/bin/env bash
# Session 14, call a (about 9 minutes): issue 21's device-fed greedy decode
# (FT_ASYNC_DECODE=1: argmax_feed picks the token on the device and feeds the
# next replayed step, one step in flight ahead of the host) against the
# synchronous loop, Llama-3-8B shape resident: run-model 256 greedy tokens
# after the 12-id prompt (off/on twice, token-identity check with --json) and
# after an 8,192-id prompt; the feed's GPU tests; issue 15's swap-out
# preemption on the GPU (TestSchedulerSwapBatchCUDA, and the s13b batch with
# a preempting cache, swap on and off, against a roomy cache).
# Usage (repo root, GPU machine): bash bench/h200-s14a.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=560
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
compile_tests kernels/cudabackend models/decoder models/generate
(MT=200 make_models) &
# swap on the GPU: the s13b batch (8 requests, 100 tokens each) in a preempting cache, swap on / off, and roomy
for fx in tiny-llama tiny-qwen3; do
  for run in "400KiB 64MiB" "400KiB 0" "64MiB 0"; do
    set -- $run; tag=$fx-$1-swap$2
    timeout 60 $b run-model --model testdata/$fx --device cuda:0 --batch-file bench/s13b-batch.jsonl --out "$out/b-$tag.txt" --kv-cache $1 --swap-space $2 >"$out/b-$tag.log" 2>&1
    echo "batch $tag rc=$?: $(tail -1 "$out/b-$tag.log")" | tee -a "$out/summary.txt"
  done
  python3 -c "
import json,sys
r=lambda f: sorted((json.loads(l) for l in open(f)), key=lambda x: x['index'])
roomy=r(sys.argv[3])
for f in sys.argv[1:3]:
  a=r(f); print('batch', f.split('/')[-1], 'vs roomy: same generated_ids in', sum(x['generated_ids']==y['generated_ids'] for x,y in zip(a,roomy)), 'of', len(a))" \
    "$out/b-$fx-400KiB-swap64MiB.txt" "$out/b-$fx-400KiB-swap0.txt" "$out/b-$fx-64MiB-swap0.txt" 2>&1 | tee -a "$out/summary.txt"
done
wait
log models-ready
runt feed cudabackend kernels/cudabackend 'TestArgmaxFeed'
runt fedgen decoder models/decoder 'TestAsyncDecodeGPU|TestGenerateFed'
runt swap generate models/generate 'TestSchedulerSwapBatchCUDA'
for i in 1 2; do
  rmodel async0-$i FT_ASYNC_DECODE=0 -- --max-new-tokens 256
  rmodel async1-$i FT_ASYNC_DECODE=1 -- --max-new-tokens 256
done
rmodel async0-json FT_ASYNC_DECODE=0 -- --max-new-tokens 256 --json
rmodel async1-json FT_ASYNC_DECODE=1 -- --max-new-tokens 256 --json
python3 - "$out" <<'PY' | tee -a "$out/summary.txt"
import json, sys
o = sys.argv[1]
def ids(t):
    for line in open(f"{o}/rm-{t}.txt"):
        if line.startswith("{"):
            return json.loads(line)
    return None
a, b = ids("async0-json"), ids("async1-json")
if a and b:
    print("tokens equal:", a["generated_ids"] == b["generated_ids"],
          "| ms/token off %.3f on %.3f" % (a["decode_ms_per_token"], b["decode_ms_per_token"]))
else:
    print("tokens: a --json run failed")
PY
# 8,192-id prompt, then 256 greedy tokens (context 8,192..8,447)
long=$(seq -s, 100 8291)
for v in 0 1 0 1; do
  left || break
  FT_ASYNC_DECODE=$v timeout 90 $b run-model --model $m --device cuda:0 --token-ids $long --ignore-eos --max-new-tokens 256 >"$out/rm-8k-$v.txt" 2>&1
  tail -1 "$out/rm-8k-$v.txt" | sed "s/^/run-model 8k async=$v: /" | tee -a "$out/summary.txt"
done
finish
