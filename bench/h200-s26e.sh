#!/usr/bin/env bash
# Session 26, call e (about 5 minutes on a fresh machine): with the FP8
# norms folded (the default since 2a8b055), the decode attention's
# settings and the o/down GEMV variant for the resident FP8 step at 512
# (environment only), then issue 18's other figures at this code: FP8
# decode streamed and at 8 GiB, FP8 and BF16 prefill 2,048 resident.
# Usage (repo root, GPU machine): bash bench/h200-s26e.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=480
start_call
make_fp8
log figures
R="--budgets resident --mode decode --context 512 --iters 20"
one f8-base-a -- --model $f8 $R
for e in FT_DECODE_CHUNK=128 FT_DECODE_CHUNK=512 FT_DECODE_VARIANT=s2w4h1tp FT_DECODE_VARIANT=s3w4h1tf FT_DECODE_VARIANT=s4w2h1t FT_DECODE_VARIANT=s3w4h1rf FT_FP8_VARIANT=mm2; do
  one f8-$e $e -- --model $f8 $R
done
one f8-base-b -- --model $f8 $R
BT=150 one f8-stream -- --model $f8 --budgets 0,8GiB --mode decode --iters 10
one f8-prefill -- --model $f8 --budgets resident --mode prefill --tokens 2048 --iters 5
one bf-prefill -- --model $m --budgets resident --mode prefill --tokens 2048 --iters 5
grep -E '^(resident|0 |8GiB)' "$out/f8-stream.txt" "$out/f8-prefill.txt" "$out/bf-prefill.txt" >>"$out/summary.txt"
finish
