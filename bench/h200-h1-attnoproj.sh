#!/usr/bin/env bash
# Issue 21, helper h1: the fused one-token attention + o_proj
# (FT_ATTN_OPROJ, kernels/cuda/attnoproj.cu; off by default, never run on a
# GPU before this script). Its GPU tests, then the resident decode step at
# context 512 and run-model 256 tokens with it off and on, interleaved, and
# a sweep of the W_o rows each block copies into shared memory before its
# attention (FT_ATTN_OPROJ_PREROWS, default 128). About 6 minutes.
# Usage (repo root, GPU machine): bash bench/h200-h1-attnoproj.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=540
build_cuda
compile_tests kernels/cudabackend models/all
make_models
wait
export FT_KERNEL_CACHE=$PWD/bin/kernels
log tests
TT=150 runt ao-kern cudabackend kernels/cudabackend 'AttnOProj'
TT=150 runt ao-model all models/all 'AttnOProj'
cat "$out/tests.txt"
log ab
R="--budgets resident"; BT=60
D="$R --model $m --mode decode --context 512 --iters 20"
one d512-off FT_ATTN_OPROJ=0 -- $D
one d512-on FT_ATTN_OPROJ=1 -- $D
one d512-off-b FT_ATTN_OPROJ=0 -- $D
one d512-on-b FT_ATTN_OPROJ=1 -- $D
one d512-on-p0 FT_ATTN_OPROJ=1 FT_ATTN_OPROJ_PREROWS=0 -- $D
one d512-on-p64 FT_ATTN_OPROJ=1 FT_ATTN_OPROJ_PREROWS=64 -- $D
one d512-on-p192 FT_ATTN_OPROJ=1 FT_ATTN_OPROJ_PREROWS=192 -- $D
ids=37,235,396,72,255,393,203,133,335,448,144,129
rmodel() { # tag env...
  left || return; local tag=$1; shift
  env "$@" timeout 40 $b run-model --model $m --device cuda:0 --token-ids $ids --max-new-tokens 256 --ignore-eos 2>&1 | tail -1 | sed "s/^/run-model $tag: /" | tee -a "$out/summary.txt"
}
rmodel off FT_ATTN_OPROJ=0
rmodel on FT_ATTN_OPROJ=1
rmodel off-b FT_ATTN_OPROJ=0
rmodel on-b FT_ATTN_OPROJ=1
one d512-on-kp FT_ATTN_OPROJ=1 -- $D --kernel-profile
finish
