#!/usr/bin/env bash
# Session 29, call b: the RoPE twins of the decode attention
# (kernels.RoPEAttender; decode_tr.cu's FT_TR_ROPE_VARIANT: the query and
# the new key rotated inside the attention, no rope_store_bf16 launch
# between the q/k/v projection and it). (1) TestRoPEAttendGPU (bit for bit
# against rope_store_bf16 + the attention, graph replay, declines) and the
# neighbouring decode tests; (2) the resident FP8 step at 512 with the twin
# (default) and without (FT_ROPE_ATTEND=0), alternating, then BF16 and
# run-model; (3) models/all's GPU and golden tests on the new default path.
# Usage (repo root, GPU machine): bash bench/h200-s29b.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=560
start_call kernels/cudabackend models/all
make_fp8
log tests
TT=120 runt rope cudabackend kernels/cudabackend 'TestRoPEAttendGPU|TestContigPipeFor|TestRoPEStoreKV|TestCapturedStep|TestDecodePipe'
tests_done || { finish; exit 0; }
R="--budgets resident --mode decode --context 512"
log bench
one f8-on-a -- --model $f8 $R --iters 20
one f8-off-a FT_ROPE_ATTEND=0 -- --model $f8 $R --iters 20
one f8-on-b -- --model $f8 $R --iters 20
one f8-off-b FT_ROPE_ATTEND=0 -- --model $f8 $R --iters 20
one f8-on-2k -- --model $f8 --budgets resident --mode decode --context 2000 --iters 20
one f8-off-2k FT_ROPE_ATTEND=0 -- --model $f8 --budgets resident --mode decode --context 2000 --iters 20
one bf-on -- --model $m $R --iters 20
one bf-off FT_ROPE_ATTEND=0 -- --model $m $R --iters 20
log models
TT=150 runt models all models/all 'GPU|TestGolden|TestBatch'
left 540 && TT=60 runt models-fp8 all models/all 'FP8'
tests_done
finish
