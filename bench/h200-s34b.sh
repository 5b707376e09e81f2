#!/usr/bin/env bash
# Session 34, call b: batched forwards computing host layers (45c976f …)
# on the H200 for the first time. (1) models/all's batched host tests with
# the GPU (TestBatchHostEveryDevice's cuda:0 case: a layer forced onto the
# host, every other streamed; batched logits and greedy tokens against each
# sequence alone through the same offloaded model). (2) Llama-3-8B shape,
# `bench --batch 1,16,64 --context 512 --host-threads 16` at 8 GiB and at
# 0: each budget's two-way rows (no host unit) beside its "+host" rows
# (three-way plans for the batch's tokens, host layers over the paged
# cache's mirror on the host); FT_TRACE on for the plans.
# Usage (repo root, GPU machine): bash bench/h200-s34b.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=560
start_call models/all
log tests
TT=150 runt hb all models/all 'TestBatchHostEveryDevice|TestBatchHost$|TestBatchHostMirrorKept|TestBatchForcedHost|TestMirror'
tests_done
log batch-host
bb() { # tag env...
  left ${LEFT:-500} || { echo "bb $1: skipped (time)" | tee -a "$out/summary.txt"; return; }
  local tag=$1; shift; log "bb $tag"
  env FT_TRACE=1 "$@" timeout ${BBT:-200} $b bench --device cuda:0 --model $m --budgets ${BB:-0,8GiB} --batch ${BS:-1,16,64} \
    --context 512 --iters 5 --warmup 2 --host-threads 16 >"$out/bb-$tag.txt" 2>&1
  echo "bb $tag: $(grep -E '^(0|8GiB)(\+host)? ' "$out/bb-$tag.txt" | tr -s ' ' | tr '\n' '|')" | tee -a "$out/summary.txt"
}
BB=8GiB LEFT=330 bb 8g
BB=0 BBT=180 LEFT=400 bb 0
finish
