#!/usr/bin/env bash
# Session 10, call b (about 9 minutes): the GPU tests of FT_ROPE_ATTN (RoPE and
# the KV store inside decode attention), of the host-mapped embedding table
# (FT_EMBED_HOST) and the resident A/B of FT_ROPE_ATTN at 512 and 8,192; then
# the hybrid with the session's host changes (block rates, embedding on the
# host) against both off, from a dropped page cache.
# Usage (repo root, GPU machine): bash bench/h200-s10b.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=520
build_cuda
compile_tests models/all kernels/cudabackend offload
MT=240 make_models
wait
export FT_KERNEL_CACHE=$PWD/bin/kernels
log tests
TT=60 runt ra2 cudabackend kernels/cudabackend '^TestAttendRoPEGPU$'
TT=90 runt ra all models/all '^TestRoPEAttentionDecodeGPU$'
TT=90 runt emb offload offload '^TestGPUEmbed'
cat "$out/tests.txt" >>"$out/summary.txt"
log resident
F="--model $m --budgets resident --mode decode --iters 20"
one ra-off-512 NOOP=1 -- $F --context 512
one ra-on-512 FT_ROPE_ATTN=1 -- $F --context 512
rmodel ra-off NOOP=1 -- --max-new-tokens 256
rmodel ra-on FT_ROPE_ATTN=1 -- --max-new-tokens 256
rmodel ra-off-b NOOP=1 -- --max-new-tokens 256
rmodel ra-on-b FT_ROPE_ATTN=1 -- --max-new-tokens 256
one ra-off-8k NOOP=1 -- $F --context 8192
one ra-on-8k FT_ROPE_ATTN=1 -- $F --context 8192
log hybrid
sync; echo 3 >/proc/sys/vm/drop_caches
HI=8 LEFT=330 hyb new NOOP=1
HI=8 LEFT=400 hyb old FT_HOST_BLOCK_RATES=0 FT_EMBED_HOST=0
HI=8 LEFT=450 hyb new-b NOOP=1
finish
