#!/usr/bin/env bash
# Session 8, call a (issue 20, about 5–6 minutes): why a host-placed layer
# takes 3.5 ms alone in `bench-host --layer` but 4.4–4.7 ms a unit inside the
# hybrid decode forward, even with no copy beside it. The code paths are the
# same (one-op DecodeLayer, same pool, threads, spin and prefetch settings;
# the engine's per-unit time spans only the layer's call: h9-hostgap's
# report). What differs is the memory the layer reads and what else runs:
#   1. cache reuse: bench-host steps one 436 MB layer over and over (and its
#      four step kinds interleave over the same weights); a host stretch
#      reads 20–30 distinct layers once a token. --layer-count 8 rotates over
#      eight layers (3.5 GB), so no step finds weights in the LLC.
#   2. memory kind: bench-host's weights are Go heap (4 KiB pages: the Go
#      runtime leaves THP to the kernel, enabled=madvise); the engine's are
#      the GPU device's pinned blocks (mmap + MADV_HUGEPAGE + touch +
#      cuMemHostRegister). --layer-pinned cuda:0 takes the bench's weights
#      from there; the tool prints the AnonHugePages of the weights' mappings.
#   3. the process around the layer: CUDA driver threads, Go GC, other
#      goroutines taking cores from the 16 pool workers. Sampled per thread
#      (CPU ticks, involuntary context switches) while the hybrid runs, with
#      GODEBUG=gctrace=1 counting GCs, and A/B: GOGC=off, --host-threads 15.
# Usage (repo root, GPU machine): bash bench/h200-s8a.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=280
{ for f in enabled defrag khugepaged/defrag; do echo "thp $f: $(cat /sys/kernel/mm/transparent_hugepage/$f 2>&1)"; done
  lscpu | grep -iE 'model name|^cpu\(s\)|cache|mhz|numa node'
  echo "L3 (cpu0 index3): $(cat /sys/devices/system/cpu/cpu0/cache/index3/size 2>&1)"
  grep -iE 'huge|MemFree|MemAvail|^Cached' /proc/meminfo; } | tee "$out/thp.txt"
build_cuda
make_models

# Decides 1 and 2. Rows: "layer as placed" ms of each. If rot8 ≈ 4.4 ms and
# one ≈ 3.5: the gap is cache reuse in the bench (the engine's figure is the
# true one, the bench's is optimistic). If pin8 > rot8: the pinned memory
# reads slower (page kind / registration); the "weights:" line says whether
# its mappings have huge pages.
hl() { # tag args...
  left || { echo "hl $1: skipped (time)" | tee -a "$out/summary.txt"; return; }
  local tag=$1; shift; log "hl $tag"
  timeout 90 $b bench-host --layer --threads 16 --layer-iters 30 "$@" >"$out/hl-$tag.txt" 2>&1
  echo "hl $tag ($*): $(grep -E '^weights' "$out/hl-$tag.txt" | cut -c1-140) | $(grep -E '^(layer as placed|separate ops|GEMVs alone)' "$out/hl-$tag.txt" | awk '{printf "%s %s %s ms; ", $1, $2, $(NF-2)}')" | tee -a "$out/summary.txt"
}
hl one
hl rot8 --layer-count 8
hl pin8 --layer-count 8 --layer-pinned cuda:0
hl pin1 --layer-pinned cuda:0

# The infer process itself (comm infer-cuda), not the timeout wrapper that
# s7f's `pgrep -f` caught.
inferpid() { pgrep -x infer-cuda | head -1; }
sample() { # tag: every 2 s the process's AnonHugePages/Rss, all mappings and those ≥ 256 MiB
  while sleep 2; do
    p=$(inferpid); [ -n "$p" ] || continue
    awk -v t=$(( $(date +%s) - t0 )) '
      /^[0-9a-f]+-[0-9a-f]+ /{big=0}
      /^Size:/{big=($2>=262144)}
      /^AnonHugePages:/{h+=$2; if(big) bh+=$2}
      /^Rss:/{r+=$2; if(big) br+=$2}
      END{printf "+%ss all: AnonHugePages %d MiB of Rss %d MiB; mappings >= 256 MiB: AnonHugePages %d MiB of Rss %d MiB\n", t, h/1024, r/1024, bh/1024, br/1024}' /proc/$p/smaps 2>/dev/null
  done >>"$out/smaps-$1.txt"
}
snap() { # pid: "tid comm utime+stime nonvoluntary_switches" per thread
  local t
  for t in /proc/$1/task/*; do
    printf '%s %s %s %s\n' "${t##*/}" "$(tr ' ' _ <$t/comm 2>/dev/null)" \
      "$(sed 's/.*) //' $t/stat 2>/dev/null | awk '{print $12+$13}')" \
      "$(awk '/^nonvoluntary_ctxt_switches/{print $2}' $t/status 2>/dev/null)"
  done
}
threads() { # tag: every 4 s, each thread's CPU (% of a core) and involuntary switches over 2 s, busiest first
  while sleep 2; do
    p=$(inferpid); [ -n "$p" ] || continue
    snap $p >"$out/.s1"; sleep 2; snap $p >"$out/.s2"
    echo "+$(( $(date +%s) - t0 ))s"
    awk 'NR==FNR{u[$1]=$3; n[$1]=$4; next} ($1 in u){d=$3-u[$1]; if(d>0) printf "  %-8s %-16s %4d%% cpu %6d invol\n", $1, $2, d/2, $4-n[$1]}' "$out/.s1" "$out/.s2" | sort -k3 -nr | head -22
  done >>"$out/threads-$1.txt"
}
# Decides 3. Per hybrid: the plan, the host unit time in the forward, GCs
# during the run (gctrace lines), the big mappings' huge pages, and the
# busiest threads (threads-TAG.txt: 16 pool workers near 100% and any other
# thread near 100% is a core taken from them; high "invol" on workers means
# the OS preempted them). GOGC=off: GC's share. --host-threads 15: a core
# left free for the driver/runtime threads; if units get faster per thread
# count lost, contention is the cause.
hyb() { # tag threads env...
  left || { echo "hyb $1: skipped (time)" | tee -a "$out/summary.txt"; return; }
  local tag=$1 th=$2; shift 2; log "hyb $tag"
  sample $tag & local sp=$!
  threads $tag & local tp=$!
  env FT_TRACE=1 GODEBUG=gctrace=1 "$@" timeout 100 $b bench --device cuda:0 --model $m --budgets 0 --mode decode --iters 5 --host-threads $th >"$out/hyb-$tag.txt" 2>&1
  kill $sp $tp 2>/dev/null; wait $sp $tp 2>/dev/null
  # Each host unit's median (and first..last sample) in unit order, "*" the
  # first of a stretch: a slow stretch start means the pool's wake-up; a
  # few slow units, something about their blocks.
  grep -o 'in unit order.*' "$out/hyb-$tag.txt" | head -1 | cut -c1-700 | sed "s/^/  $tag units /" | tee -a "$out/summary.txt"
  echo "hyb $tag: $(grep -E '^0\+host' "$out/hyb-$tag.txt" | tr -s ' ') | $(grep -o 'host unit measured [0-9.]* ms' "$out/hyb-$tag.txt" | tr '\n' ' ') | gc cycles $(grep -c '^gc [0-9]' "$out/hyb-$tag.txt") | $(sort -k19 -n "$out/smaps-$tag.txt" 2>/dev/null | tail -1)" | tee -a "$out/summary.txt"
}
hyb base 16
hyb nogc 16 GOGC=off GOMEMLIMIT=48GiB
hyb t15 15
rm -f "$out/.s1" "$out/.s2"
finish
