#!/usr/bin/env bash
# Session 29, call d: decode attention over short caches with its splits
# merged inside a thread-block cluster (cluster.go; decode_tr.cu's
# FT_TR_CLUSTER_VARIANT: distributed shared memory instead of global
# partials, a fence and a counter; s29c's trace put ~6 µs of the 8.7 µs
# attention a layer in that merge). (1) TestDecodeClusterGPU and the
# decode tests around it, models/all GPU, golden, batch and FP8 tests;
# (2) the resident FP8 step at 512 and 2,000 and BF16 at 512, cluster
# twins (default) against FT_DECODE_CLUSTER=0, alternating; run-model;
# (3) the block trace with the twins, if time is left.
# Usage (repo root, GPU machine): bash bench/h200-s29d.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=560
start_call kernels/cudabackend models/all
make_fp8
log tests
TT=150 runt cluster cudabackend kernels/cudabackend 'TestDecodeClusterGPU|TestContigPipeFor|TestDecodePipePositions|TestDecodePipeCapturedStep|TestDecodeMMA'
tests_done || { finish; exit 0; }
R="--budgets resident --mode decode --context 512"
log bench
one f8-on-a -- --model $f8 $R --iters 20
one f8-off-a FT_DECODE_CLUSTER=0 -- --model $f8 $R --iters 20
one f8-on-b -- --model $f8 $R --iters 20
one f8-off-b FT_DECODE_CLUSTER=0 -- --model $f8 $R --iters 20
one f8-on-2k -- --model $f8 --budgets resident --mode decode --context 2000 --iters 20
one f8-off-2k FT_DECODE_CLUSTER=0 -- --model $f8 --budgets resident --mode decode --context 2000 --iters 20
one bf-on -- --model $m $R --iters 20
one bf-off FT_DECODE_CLUSTER=0 -- --model $m $R --iters 20
rmodel on -- --max-new-tokens 256
rmodel off FT_DECODE_CLUSTER=0 -- --max-new-tokens 256
log models
TT=150 runt models all models/all 'GPU|TestGolden|TestBatch'
TT=60 runt models-fp8 all models/all 'FP8'
tests_done
o=$(cd "$out" && pwd)
if left 400; then
  log traced
  BT=200 one f8-traced FT_BLOCK_TRACE=$o/trace.txt -- --model $f8 $R --iters 10
  grep -E "^# " "$o/trace.txt" | head -14 >>"$out/summary.txt"
  grep -E "attn_decode" "$o/trace.txt" | sed -n '10,12p' >>"$out/summary.txt"
fi
finish
