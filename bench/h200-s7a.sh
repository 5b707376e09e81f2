#!/usr/bin/env bash
# The seventh 2026-12-01 session's first call (issue 18): the FP8 GEMV
# tuning variants never swept on the resident FP8 decode step (u4/u8/u16
# loads in flight, one or two rows a warp, x in shared or global memory),
# each with its kernel profile and its graph-replayed step, the default
# interleaved. About 5 minutes.
# Usage (repo root, GPU machine): bash bench/h200-s7a.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=520
build_cuda
git rev-parse --short HEAD >"$out/commit.txt" 2>/dev/null
f8=/tmp/llama3-8b-fp8
log make-model
[ -d $f8 ] || timeout 150 $b make-model --shape llama3-8b --dtype fp8-channel --out $f8 >"$out/make-model.txt" 2>&1
log sweep
BT=70
F="--budgets resident --model $f8 --mode decode --context 512 --iters 20"
one f8-u8r1s NOOP=1 -- $F
for v in u8r2s u16r1s u16r2s u4r2s u8r2g u16r2g; do
  one f8-$v FT_FP8_VARIANT=$v -- $F
done
one f8-u8r1s-b NOOP=1 -- $F
one f8-u8r1s-prof NOOP=1 -- $F --kernel-profile
one f8-u16r2s-prof FT_FP8_VARIANT=u16r2s -- $F --kernel-profile
finish
