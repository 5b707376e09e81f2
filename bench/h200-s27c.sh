#!/usr/bin/env bash
# Session 27, calls c and d: the replayed resident decode step at 512, launch by
# launch, from the blocks' own clocks (FT_BLOCK_TRACE: every block of every
# kernel records its start, the end of its dependent-launch wait and its
# end; bench appends one replayed step's launches to the file): FP8 and
# BF16. nsys is not on the machine (s27b). The traced graph step's time is
# printed beside an untraced one's, to show what the records cost.
# Usage (repo root, GPU machine): bash bench/h200-s27c.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=420
start_call
make_fp8
o=$(cd "$out" && pwd)
R="--budgets resident --mode decode --context 512 --iters 10"
BT=200 one f8-traced FT_BLOCK_TRACE=$o/trace-f8.txt -- --model $f8 $R
one f8-plain -- --model $f8 $R
BT=150 one f8-traced-c128 FT_DECODE_CHUNK=128 FT_BLOCK_TRACE=$o/trace-f8c128.txt -- --model $f8 $R
BT=150 one bf-traced FT_BLOCK_TRACE=$o/trace-bf.txt -- --model $m $R
one bf-plain -- --model $m $R
tail -3 "$out"/f8-traced.txt
finish
