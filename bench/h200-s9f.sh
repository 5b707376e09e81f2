#!/usr/bin/env bash
# Session 9, call f (about 5 minutes): FT_PACK_EVICT (the checkpoint's page
# cache evicted before the pinned blocks are made, and each unit's file range
# after its copy), against the default, on the hybrid.
# Usage (repo root, GPU machine): bash bench/h200-s9f.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=400
build_cuda
make_models
export FT_KERNEL_CACHE=$PWD/bin/kernels
mem() { { echo "== $1"; grep -E 'MemFree|^Cached' /proc/meminfo; } >>"$out/mem.txt"; }
hyb() { # tag env...
  left ${LEFT:-330} || { echo "hyb $1: skipped (time)" | tee -a "$out/summary.txt"; return; }
  local tag=$1; shift; log "hyb $tag"; mem "before $tag"
  env FT_TRACE=1 "$@" timeout ${HT:-100} $b bench --device cuda:0 --model $m --budgets 0,8GiB --mode decode --iters 10 --host-threads 16 >"$out/hyb-$tag.txt" 2>&1
  echo "hyb $tag: $(grep -E '^(0\+host|8GiB\+host)' "$out/hyb-$tag.txt" | tr -s ' ' | tr '\n' '|') $(grep -o 'host unit measured [0-9.]* ms' "$out/hyb-$tag.txt" | tr '\n' ' ')" | tee -a "$out/summary.txt"
  grep -iE 'evict' "$out/hyb-$tag.txt" | head -3 | cut -c1-200 | tee -a "$out/summary.txt"
}
HT=200 hyb evict FT_PACK_EVICT=1
hyb default NOOP=1
LEFT=250 HT=150 hyb evict-b FT_PACK_EVICT=1
left 360 && { timeout 30 $b bench-host --chunk-map 16 --threads 16 --chunk-passes 2 >"$out/cm-end.txt" 2>&1; grep -E '^chunk medians' "$out/cm-end.txt" | tee -a "$out/summary.txt"; }
cat "$out/mem.txt" >>"$out/summary.txt"
finish
