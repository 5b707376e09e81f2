#!/usr/bin/env bash
# Session 15, call a (about 7 minutes): what the run-model decode step
# (Llama-3-8B and Qwen3-8B shapes, resident, contexts 12-267) spends on its
# latency-bound kernels, and the compiled decode-attention variants, split
# sizes and GEMV switches at these short contexts (they were tuned at 512,
# 8,192 and 32,000). Interleaved with the default; FT_SKIP_KERNELS runs give
# wrong tokens and right times.
# Usage (repo root, GPU machine): bash bench/h200-s15a.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=480
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
q3=/tmp/qwen3-8b
(MT=240 make_models) &
timeout 240 $b make-model --shape qwen3-8b --out $q3 >"$out/make-model-q3.txt" 2>&1
sed -i 's/"max_position_embeddings": [0-9]*/"max_position_embeddings": 40960/' $q3/config.json
wait
log ready
R="-- --max-new-tokens 256"
rmodel d1 NOOP=1 $R
rmodel tf FT_DECODE_VARIANT=s3w4h1tf $R
rmodel r FT_DECODE_VARIANT=s3w4h1r $R
rmodel s2t FT_DECODE_VARIANT=s2w4h1t $R
rmodel s4w2t FT_DECODE_VARIANT=s4w2h1t $R
rmodel d2 NOOP=1 $R
rmodel s3w2t FT_DECODE_VARIANT=s3w2h1t $R
rmodel s4w2tf FT_DECODE_VARIANT=s4w2h1tf $R
rmodel ch128 FT_DECODE_CHUNK=128 $R
rmodel ch256 FT_DECODE_CHUNK=256 $R
rmodel d3 NOOP=1 $R
rmodel fusenorm FT_FUSE_NORM=1 $R
rmodel gemvpipe FT_GEMV=pipe $R
rmodel nopipe FT_DECODE_PIPE=0 $R
rmodel d4 NOOP=1 $R
rmodel skip-attn FT_SKIP_KERNELS=attn_ $R
rmodel skip-norm FT_SKIP_KERNELS=rmsnorm $R
rmodel skip-rope FT_SKIP_KERNELS=rope_ $R
rmodel d5 NOOP=1 $R
m=$q3 rmodel q3-d1 NOOP=1 $R
m=$q3 rmodel q3-tf FT_DECODE_VARIANT=s3w4h1tf $R
m=$q3 rmodel q3-fusenorm FT_FUSE_NORM=1 $R
m=$q3 rmodel q3-skip-attn FT_SKIP_KERNELS=attn_ $R
m=$q3 rmodel q3-skip-qk FT_SKIP_KERNELS=qknorm $R
m=$q3 rmodel q3-d2 NOOP=1 $R
finish
