#!/usr/bin/env bash
# Issue 20, run-model against bench at 8 GiB + 16 host threads (about 6
# minutes): the same defaults in both, interleaved, each process with
# FT_TOKEN_TRACE=1 (a line a token or forward: forward / pick / outside, GC
# cycles, the offload engine's pass and plan; a steady-vs-others median at
# the end) and FT_TRACE=1 (the plans put in force, the host units measured).
# The figure to compare: run-model's "tokens steady: N, median X ms" against
# bench's "8GiB+host" measured ms and its "forwards steady" median.
# Usage (repo root, GPU machine): bash bench/h200-h3-runmodel.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=420
build_cuda
MT=240 make_models
export FT_KERNEL_CACHE=$PWD/bin/kernels
sync; echo 3 >/proc/sys/vm/drop_caches
for i in 1 2 3; do
  RT=90 rmodel rm48-$i FT_TOKEN_TRACE=1 FT_TRACE=1 -- --max-new-tokens 48 --gpu-budget 8GiB --host-threads 16
  HB=8GiB HI=10 HT=90 hyb b8-$i FT_TOKEN_TRACE=1
done
RT=120 rmodel rm160 FT_TOKEN_TRACE=1 FT_TRACE=1 -- --max-new-tokens 160 --gpu-budget 8GiB --host-threads 16
grep -H "token-trace: tokens steady\|token-trace: forwards steady\|plan replaced\|plan kept\|plan from profiling\|host units measured" "$out"/rm-*.txt "$out"/hyb-*.txt >>"$out/summary.txt"
finish
