#!/usr/bin/env bash
# Session 28, call d: (1) tests: TestContigPipeFor (caches of at most
# 2,048 rows take s2w8h1tp), the captured decode step, the models' GPU,
# golden and FP8 tests (their short caches now run s2w8h1tp); (2) the
# resident FP8 step at 512 interleaved twice: the default (s2w8h1tp, every
# FP8 kind persistent), the old attention default s3w4h1tp, the persistent
# grids FT_FP8_PERSIST_GRID=even and o1, FT_FP8_VARIANT=mp4 everywhere;
# (3) s2w8h1tp against s3w4h1tp at contexts 1,024 and 2,000 (capacities
# under 2,048), FP8 and BF16, and run-model; (4) one traced step.
# Usage (repo root, GPU machine): bash bench/h200-s28d.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=540
start_call kernels/cudabackend models/all
make_fp8
o=$(cd "$out" && pwd)
log tests
TT=100 runt dec cudabackend kernels/cudabackend 'TestContigPipeFor|TestDecodePipeCapturedStep|TestFP8Persist$|TestCapturedStep'
TT=150 runt models all models/all 'GPU|FP8|TestGolden'
tests_done
log figures
R="--budgets resident --mode decode --iters 20"
for r in a b; do
  one f8-$r -- --model $f8 $R --context 512
  one f8-s3w4-$r FT_DECODE_VARIANT=s3w4h1tp -- --model $f8 $R --context 512
  one f8-even-$r FT_FP8_PERSIST_GRID=even -- --model $f8 $R --context 512
  one f8-o1-$r FT_FP8_PERSIST_GRID=o1 -- --model $f8 $R --context 512
  one f8-mp4-$r FT_FP8_VARIANT=mp4 -- --model $f8 $R --context 512
done
for c in 1024 2000; do
  one f8-$c -- --model $f8 $R --context $c
  one f8-s3w4-$c FT_DECODE_VARIANT=s3w4h1tp -- --model $f8 $R --context $c
  one bf-$c -- --model $m $R --context $c
  one bf-s3w4-$c FT_DECODE_VARIANT=s3w4h1tp -- --model $m $R --context $c
done
one bf-512 -- --model $m $R --context 512
one bf-s3w4-512 FT_DECODE_VARIANT=s3w4h1tp -- --model $m $R --context 512
rmodel s2w8 -- --max-new-tokens 256
rmodel s3w4 FT_DECODE_VARIANT=s3w4h1tp -- --max-new-tokens 256
BT=150 one f8-traced FT_BLOCK_TRACE=$o/trace.txt -- --model $f8 --budgets resident --mode decode --context 512 --iters 10
finish
