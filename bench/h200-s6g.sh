#!/usr/bin/env bash
# The sixth 2026-12-01 session's sweep of the one-sequence decode attention
# at short contexts (about 4 minutes): the pipelined kernel's fewest
# positions a split (FT_DECODE_CHUNK) and the transposed variants
# (FT_DECODE_VARIANT) at context 512 and 8,192, and run-model (contexts
# 12–268), interleaved with the default.
# Usage (repo root, GPU machine): bash bench/h200-s6g.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=330
build_cuda
make_models
log sweep
R="--budgets resident"; BT=60
D="$R --model $m --mode decode --context 512 --iters 20"
one d512 NOOP=1 -- $D
one d512-c64 FT_DECODE_CHUNK=64 -- $D
one d512-s2 FT_DECODE_VARIANT=s2w4h1t -- $D
one d512-s3w2 FT_DECODE_VARIANT=s3w2h1t -- $D
one d512-s3w2-c64 FT_DECODE_VARIANT=s3w2h1t FT_DECODE_CHUNK=64 -- $D
one d512-c256 FT_DECODE_CHUNK=256 -- $D
one d512-b NOOP=1 -- $D
one d512-c64-b FT_DECODE_CHUNK=64 -- $D
ids=37,235,396,72,255,393,203,133,335,448,144,129
rmodel() { # tag env...
  left || return; local tag=$1; shift
  env "$@" timeout 40 $b run-model --model $m --device cuda:0 --token-ids $ids --max-new-tokens 256 --ignore-eos 2>&1 | tail -1 | sed "s/^/run-model $tag: /" | tee -a "$out/summary.txt"
}
rmodel default NOOP=1
rmodel c64 FT_DECODE_CHUNK=64
rmodel s3w2 FT_DECODE_VARIANT=s3w2h1t
rmodel default-b NOOP=1
rmodel c64-b FT_DECODE_CHUNK=64
D8="$R --model $m --mode decode --context 8192 --iters 10 --warmup 2"
one d8k NOOP=1 -- $D8
one d8k-c64 FT_DECODE_CHUNK=64 -- $D8
finish
