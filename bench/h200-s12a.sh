#!/usr/bin/env bash
# Session 12, call a (about 9 minutes): first GPU run of the session's two
# decode switches, both off by default: FT_ATTN_OPROJ=1 (one-token attention
# fused with the residual-adding o_proj, issue 21 at short contexts) and
# FT_DECODE_VARIANT=s6w2h1b / s3w4h1b (the transposed decode attention with
# bulk-copy rings, issue 21 at 8,192). Their GPU tests, then A/B of the
# resident decode step and run-model.
# Usage (repo root, GPU machine): bash bench/h200-s12a.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=540
compile_tests kernels/cudabackend models/all
build_cuda
wait
export FT_KERNEL_CACHE=$PWD/bin/kernels
(MT=240 make_models) &
log tests
TT=150 runt kern cudabackend kernels/cudabackend 'AttnOProj|DecodeBulkVariant|TestDecodeMMA$|DecodePipePositions|DecodePipeCapturedStep'
TT=120 runt model all models/all 'AttnOProj'
wait
log models-ready
cat "$out/tests.txt" | tee -a "$out/summary.txt"
D="--model $m --budgets resident --mode decode --iters 20"
one ao0-512 FT_ATTN_OPROJ=0 -- $D --context 512
one ao1-512 FT_ATTN_OPROJ=1 -- $D --context 512
one ao0-512b FT_ATTN_OPROJ=0 -- $D --context 512
one ao1-512b FT_ATTN_OPROJ=1 -- $D --context 512
rmodel ao0 FT_ATTN_OPROJ=0 -- --max-new-tokens 256
rmodel ao1 FT_ATTN_OPROJ=1 -- --max-new-tokens 256
one ao1p0-512 FT_ATTN_OPROJ=1 FT_ATTN_OPROJ_PREROWS=0 -- $D --context 512
one def-8k FT_DECODE_VARIANT= -- $D --context 8192
one b6-8k FT_DECODE_VARIANT=s6w2h1b -- $D --context 8192
one b3-8k FT_DECODE_VARIANT=s3w4h1b -- $D --context 8192
one def-8kb FT_DECODE_VARIANT= -- $D --context 8192
one b6-8kb FT_DECODE_VARIANT=s6w2h1b -- $D --context 8192
one b6-32k FT_DECODE_VARIANT=s6w2h1b -- $D --context 32000
one def-32k FT_DECODE_VARIANT= -- $D --context 32000
left 520 && timeout 60 python3 bench/peer_torch_peaks.py >"$out/torch-peaks.txt" 2>&1
finish
