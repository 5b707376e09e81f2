#!/usr/bin/env bash
# Session 29, call c: the block trace with session 28's phase marks
# (FT_TRACE_MARK; s29a's traced run timed out at 150 s while NVRTC
# compiled the traced module: 420 s here), at the defaults and with the
# RoPE twin (FT_ROPE_ATTEND=1, slower in s29b: where its attention's time
# goes). The trace files come back whole (trace*.txt); summary.txt has the
# critical-path table and one layer's lines.
# Usage (repo root, GPU machine): bash bench/h200-s29c.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=560
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
make_fp8
o=$(cd "$out" && pwd)
R="--budgets resident --mode decode --context 512"
log traced
BT=420 one f8-traced FT_BLOCK_TRACE=$o/trace.txt -- --model $f8 $R --iters 10
log traced-rope
BT=120 one f8-traced-rope FT_ROPE_ATTEND=1 FT_BLOCK_TRACE=$o/trace-rope.txt -- --model $f8 $R --iters 10
for f in trace trace-rope; do
  echo "== $f" >>"$out/summary.txt"
  grep -E "^# " "$o/$f.txt" | head -30 >>"$out/summary.txt"
done
finish
