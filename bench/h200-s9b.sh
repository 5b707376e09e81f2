#!/usr/bin/env bash
# Session 9, call b (about 8 minutes): issue 20's host side.
#   - one host layer, 8 layers rotated, by software prefetch distance
#     (FT_HOST_PREFETCH unset, 1024, 2048, 4096);
#   - the hybrid (budgets 0 and 8 GiB, + host) by switch, with FT_TRACE's
#     per-forward line: defaults, FT_HOST_PREFETCH=2048, FT_HOST_AFFINITY=1,
#     both, FT_CUDA_SCHED=blocking, defaults again.
# Usage (repo root, GPU machine): bash bench/h200-s9b.sh OUTDIR
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
log layer
hl base NOOP=1
hl pf1024 FT_HOST_PREFETCH=1024
hl pf2048 FT_HOST_PREFETCH=2048
hl pf4096 FT_HOST_PREFETCH=4096
hyb() { # tag env...
  left 470 || { echo "hyb $1: skipped (time)" | tee -a "$out/summary.txt"; return; }
  local tag=$1; shift; log "hyb $tag"
  env FT_TRACE=1 "$@" timeout 100 $b bench --device cuda:0 --model $m --budgets 0,8GiB --mode decode --iters 5 --host-threads 16 >"$out/hyb-$tag.txt" 2>&1
  echo "hyb $tag: $(grep -E '^(0\+host|8GiB\+host)' "$out/hyb-$tag.txt" | tr -s ' ' | tr '\n' '|') $(grep -o 'host unit measured [0-9.]* ms' "$out/hyb-$tag.txt" | tr '\n' ' ')" | tee -a "$out/summary.txt"
  grep 'timed forwards' "$out/hyb-$tag.txt" | sed "s/^/  $tag /" | cut -c1-220 | tee -a "$out/summary.txt"
}
hyb base NOOP=1
hyb pf2048 FT_HOST_PREFETCH=2048
hyb aff FT_HOST_AFFINITY=1
hyb pf-aff FT_HOST_PREFETCH=2048 FT_HOST_AFFINITY=1
hyb blocking FT_CUDA_SCHED=blocking
hyb base-b NOOP=1
finish
