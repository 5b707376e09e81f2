#!/usr/bin/env bash
# Session 29, call e: the cluster twins' split count at context 512
# (capacity ~532: 4 splits of at most 256 rows by default) against 2 and 8
# forced (FT_DECODE_CLUSTER=2|8), FP8 and BF16, and the global merge
# (FT_DECODE_CLUSTER=0) once more; TestDecodeClusterGPU first.
# Usage (repo root, GPU machine): bash bench/h200-s29e.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=300
start_call kernels/cudabackend
make_fp8
TT=90 runt cluster cudabackend kernels/cudabackend 'TestDecodeClusterGPU'
tests_done || { finish; exit 0; }
R="--budgets resident --mode decode --context 512"
for r in a b; do
  one f8-auto-$r -- --model $f8 $R --iters 20
  one f8-c2-$r FT_DECODE_CLUSTER=2 -- --model $f8 $R --iters 20
  one f8-c8-$r FT_DECODE_CLUSTER=8 -- --model $f8 $R --iters 20
  one f8-off-$r FT_DECODE_CLUSTER=0 -- --model $f8 $R --iters 20
done
one bf-auto -- --model $m $R --iters 20
one bf-c2 FT_DECODE_CLUSTER=2 -- --model $m $R --iters 20
one bf-c8 FT_DECODE_CLUSTER=8 -- --model $m $R --iters 20
finish
