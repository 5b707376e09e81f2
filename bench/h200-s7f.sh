#!/usr/bin/env bash
# The seventh 2026-12-01 session's host-memory probe (issue 20, about 4
# minutes): why host-placed layers run slower inside the hybrid forward than
# in `bench-host --layer`. Prints the kernel's transparent-huge-page
# settings, the layer alone, then the budget-0 + host decode with the
# process's AnonHugePages/Rss sampled every 2 s (the pinned blocks host units
# read are anonymous mappings with MADV_HUGEPAGE, page-locked afterwards),
# and the same with cuMemHostAlloc blocks (FT_PINNED=alloc).
# Usage (repo root, GPU machine): bash bench/h200-s7f.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=520
{ for f in enabled defrag khugepaged/defrag; do echo "thp $f: $(cat /sys/kernel/mm/transparent_hugepage/$f 2>&1)"; done
  grep -iE 'huge|MemFree|MemAvail|^Cached' /proc/meminfo; } | tee "$out/thp.txt"
build_cuda
make_models
log layer-alone
timeout 60 $b bench-host --layer --threads 16 >"$out/hl.txt" 2>&1; grep -iE 'layer|read' "$out/hl.txt" | head -8
sample() { # tag: AnonHugePages and Rss (MiB) of the running infer-cuda every 2 s
  while sleep 2; do
    p=$(pgrep -f 'bin/infer-cuda (bench|run-model)' | head -1); [ -n "$p" ] || continue
    awk -v t=$(( $(date +%s) - t0 )) '/^AnonHugePages/{h+=$2} /^Rss/{r+=$2} END{printf "+%ss AnonHugePages %d MiB of Rss %d MiB\n", t, h/1024, r/1024}' /proc/$p/smaps 2>/dev/null
  done >>"$out/smaps-$1.txt"
}
hyb() { # tag env...
  left || return; local tag=$1; shift
  sample $tag & local sp=$!
  env FT_TRACE=1 "$@" timeout 100 $b bench --device cuda:0 --model $m --budgets 0 --mode decode --iters 5 --host-threads 16 >"$out/hyb-$tag.txt" 2>&1
  kill $sp 2>/dev/null
  echo "$tag: $(grep -E '^0\+host' "$out/hyb-$tag.txt") | $(grep -o 'host unit measured [0-9.]* ms' "$out/hyb-$tag.txt" | tail -1) | pinned $(grep 'pinned alloc' "$out/hyb-$tag.txt" | head -1 | awk '{print $5, $6}') | huge $(tail -3 "$out/smaps-$tag.txt" | head -1)" | tee -a "$out/summary.txt"
}
hyb reg NOOP=1
hyb alloc FT_PINNED=alloc
finish
