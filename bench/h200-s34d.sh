#!/usr/bin/env bash
# Session 34, call d: s34b's batched host rows again with enough warm-up
# for the plans to settle (s34b's 2 warm-up steps and 5 timed ones fell
# inside the buckets' measuring, plan switches and the mirror's first
# copies: medians of 278–546 ms against minima of 86–222), the batch
# bench now printing each plan put in force under FT_TRACE=1, and
# runtime.Convert split over the cores (the mirror's copies).
# Usage (repo root, GPU machine): bash bench/h200-s34d.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=560
start_call
log batch-host
bb() { # tag env...
  left ${LEFT:-500} || { echo "bb $1: skipped (time)" | tee -a "$out/summary.txt"; return; }
  local tag=$1; shift; log "bb $tag"
  env FT_TRACE=1 "$@" timeout ${BBT:-200} $b bench --device cuda:0 --model $m --budgets ${BB:-0,8GiB} --batch ${BS:-1,16,64} \
    --context 512 --iters 10 --warmup 12 --host-threads 16 >"$out/bb-$tag.txt" 2>&1
  echo "bb $tag: $(grep -E '^(0|8GiB)(\+host)? ' "$out/bb-$tag.txt" | tr -s ' ' | tr '\n' '|')" | tee -a "$out/summary.txt"
}
BB=8GiB LEFT=330 bb 8g
BB=0 BBT=180 LEFT=420 bb 0
finish
