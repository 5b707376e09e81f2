#!/usr/bin/env bash
# Session 28, call c: (1) tests: the decode attention's kernel tests (every
# compiled variant, the four new early-copy ones s5w4h1tp, s4w4h1tp,
# s3w8h1tp, s2w8h1tp included) and the FP8 models' tests with the
# persistent GEMVs now auto's default; (2) the resident FP8 decode step at
# 512 (s28b: 2.57 ms with every kind persistent) with the attention
# variants and chunks, interleaved twice: at 512 the default (s3w4h1tp,
# 256 positions a split) has 2 splits a KV head and 4 groups a warp, 2 of
# them copied before the wait; s5w4h1tp copies all 4 early; s3w8h1tp and
# s2w8h1tp take a split of twice the positions with 8 warps (chunk 512:
# one split, no merge through global memory).
# Usage (repo root, GPU machine): bash bench/h200-s28c.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=560
start_call kernels/cudabackend models/all
make_fp8
log tests
TT=200 runt dec cudabackend kernels/cudabackend 'TestDecodeMMA|TestDecodePipePositions|TestPagedDecodeMMA|TestDecodePipeCapturedStep|TestFP8Persist'
TT=150 runt models all models/all 'FP8|TestGolden'
tests_done
log figures
R="--budgets resident --mode decode --context 512 --iters 20"
for r in a b; do
  one f8-$r -- --model $f8 $R
  one f8-c128-$r FT_DECODE_CHUNK=128 -- --model $f8 $R
  one f8-s5w4-$r FT_DECODE_VARIANT=s5w4h1tp -- --model $f8 $R
  one f8-s5w4c128-$r FT_DECODE_VARIANT=s5w4h1tp FT_DECODE_CHUNK=128 -- --model $f8 $R
  one f8-s4w4-$r FT_DECODE_VARIANT=s4w4h1tp -- --model $f8 $R
  one f8-s3w8-$r FT_DECODE_VARIANT=s3w8h1tp -- --model $f8 $R
  one f8-s3w8c512-$r FT_DECODE_VARIANT=s3w8h1tp FT_DECODE_CHUNK=512 -- --model $f8 $R
  one f8-s2w8-$r FT_DECODE_VARIANT=s2w8h1tp -- --model $f8 $R
  one f8-s2w8c128-$r FT_DECODE_VARIANT=s2w8h1tp FT_DECODE_CHUNK=128 -- --model $f8 $R
done
one bf -- --model $m $R
one bf-s5w4 FT_DECODE_VARIANT=s5w4h1tp -- --model $m $R
finish
