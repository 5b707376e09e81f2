#!/usr/bin/env bash
# Session 9, call e (about 5 minutes): does the page cache decide which host
# memory the hybrid's pinned blocks get? s9d found guest-physical memory
# below ~29 GiB read at 125-145 GB/s and above it at 55-70 GB/s, steadily.
#   - the machine's memory layout (meminfo, buddyinfo, NUMA as the guest sees it);
#   - chunk map + hybrid as the machine is (the checkpoint in the page cache);
#   - the same after dropping the page cache (sync; drop_caches=3), twice.
# Usage (repo root, GPU machine, as root): bash bench/h200-s9e.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=540
build_cuda
make_models
export FT_KERNEL_CACHE=$PWD/bin/kernels
mem() { { echo "== $1"; grep -E 'MemTotal|MemFree|^Cached|AnonHuge' /proc/meminfo; cat /proc/buddyinfo; } >>"$out/mem.txt"; }
cm() { # tag
  left 480 || return; local tag=$1; log "chunk-map $tag"
  timeout 60 $b bench-host --chunk-map 16 --threads 16 --chunk-passes 2 >"$out/cm-$tag.txt" 2>&1
  echo "cm $tag: $(grep -E '^chunk medians' "$out/cm-$tag.txt") fast(>100): $(awk '/^ *[0-9]+ +[0-9]+ /{n++; if ($(NF-1)>100) f++} END{print f"/"n}' "$out/cm-$tag.txt") phys of slow: $(awk '/^ *[0-9]+ +[0-9]+ /{if ($(NF-1)<80) print $NF}' "$out/cm-$tag.txt" | head -3 | tr '\n' ' ')" | tee -a "$out/summary.txt"
}
hyb() { # tag
  left 480 || { echo "hyb $1: skipped (time)" | tee -a "$out/summary.txt"; return; }
  local tag=$1; log "hyb $tag"
  env FT_TRACE=1 timeout 100 $b bench --device cuda:0 --model $m --budgets 0,8GiB --mode decode --iters 10 --host-threads 16 >"$out/hyb-$tag.txt" 2>&1
  echo "hyb $tag: $(grep -E '^(0\+host|8GiB\+host)' "$out/hyb-$tag.txt" | tr -s ' ' | tr '\n' '|') $(grep -o 'host unit measured [0-9.]* ms' "$out/hyb-$tag.txt" | tr '\n' ' ')" | tee -a "$out/summary.txt"
}
{ nproc; lscpu | grep -iE 'model name|numa|L3'; ls /sys/devices/system/node/ | grep node; } >"$out/machine.txt" 2>&1
mem start
cm as-is
hyb as-is
mem after-hyb
sync; echo 3 > /proc/sys/vm/drop_caches; mem dropped
cm dropped
hyb dropped
mem after-hyb2
sync; echo 3 > /proc/sys/vm/drop_caches
hyb dropped2
cm end
cat "$out/machine.txt" | tee -a "$out/summary.txt"
finish
