#!/usr/bin/env bash
# Session 9, call c (about 6 minutes): the host GEMV's software prefetch in
# the hybrid, interleaved against the default because the host's speed
# drifted by ~20% within call b (the same plan 97.7 then 121.5 ms).
#   - one host layer, 8 layers rotated: default, FT_HOST_PREFETCH=1024, 2048;
#   - the hybrid (budgets 0 and 8 GiB, + host, 10 timed forwards each),
#     default and FT_HOST_PREFETCH=1024 in turn, four pairs, then 2048 once.
# Usage (repo root, GPU machine): bash bench/h200-s9c.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=540
build_cuda
make_models
export FT_KERNEL_CACHE=$PWD/bin/kernels
hl() { # tag env...
  left 440 || return; local tag=$1; shift
  env "$@" timeout 60 $b bench-host --layer --threads 16 --layer-iters 30 --layer-count 8 >"$out/hl-$tag.txt" 2>&1
  echo "hl $tag: $(grep -E '^(read|layer as placed|GEMVs)' "$out/hl-$tag.txt" | tr -s ' ' | tr '\n' '|')" | tee -a "$out/summary.txt"
}
hyb() { # tag env...
  left 500 || { echo "hyb $1: skipped (time)" | tee -a "$out/summary.txt"; return; }
  local tag=$1; shift; log "hyb $tag"
  env FT_TRACE=1 "$@" timeout 100 $b bench --device cuda:0 --model $m --budgets 0,8GiB --mode decode --iters 10 --host-threads 16 >"$out/hyb-$tag.txt" 2>&1
  echo "hyb $tag: $(grep -E '^(0\+host|8GiB\+host)' "$out/hyb-$tag.txt" | tr -s ' ' | tr '\n' '|') $(grep -o 'host unit measured [0-9.]* ms' "$out/hyb-$tag.txt" | tr '\n' ' ')" | tee -a "$out/summary.txt"
  grep 'timed forwards' "$out/hyb-$tag.txt" | sed -n '2p;4p' | sed "s/^/  $tag /" | cut -c1-200 | tee -a "$out/summary.txt"
}
log layer
hl base NOOP=1
hl pf1024 FT_HOST_PREFETCH=1024
hl pf2048 FT_HOST_PREFETCH=2048
hyb base1 NOOP=1
hyb pf1 FT_HOST_PREFETCH=1024
hyb base2 NOOP=1
hyb pf2 FT_HOST_PREFETCH=1024
hyb base3 NOOP=1
hyb pf3 FT_HOST_PREFETCH=1024
hyb base4 NOOP=1
hyb pf4 FT_HOST_PREFETCH=1024
hyb pf2048 FT_HOST_PREFETCH=2048
hl base-end NOOP=1
finish
