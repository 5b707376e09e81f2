#!/usr/bin/env bash
# Session 14, issue 21 (helper h1-async, not yet run): device-fed greedy
# decoding (FT_ASYNC_DECODE=1: the step's token picked by argmax_feed on
# the device and fed to the next replayed step, one step in flight ahead of
# the host) against the synchronous loop, on the Llama-3-8B shape resident:
# run-model 256 greedy tokens, alternating off/on twice; then the GPU tests
# of the feed (kernels/cudabackend: the kernel against argmax_rows;
# models/decoder: Generate on and off give the same tokens, cache and
# errors on the tiny fixtures). Each run-model's last line (summary.txt)
# gives "then X ms a token"; FT_TOKEN_TRACE=1 runs print each token's
# forward/pick times (rm-*-trace.txt; with the feed on, forward = the
# enqueue of the next step, pick = the wait for this token's step).
# Usage (repo root, GPU machine): bash bench/h200-s14-async.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=540
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
compile_tests kernels/cudabackend models/decoder
make_models
wait
log models-ready
for i in 1 2; do
  rmodel async0-$i FT_ASYNC_DECODE=0 -- --max-new-tokens 256
  rmodel async1-$i FT_ASYNC_DECODE=1 -- --max-new-tokens 256
done
rmodel async0-trace FT_ASYNC_DECODE=0 FT_TOKEN_TRACE=1 -- --max-new-tokens 256
rmodel async1-trace FT_ASYNC_DECODE=1 FT_TOKEN_TRACE=1 -- --max-new-tokens 256
# The two runs' tokens must agree (--json: generated_ids).
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
runt feed cudabackend kernels/cudabackend 'TestArgmaxFeed'
runt fedgen decoder models/decoder 'TestAsyncDecodeGPU|TestGenerateFed'
finish
