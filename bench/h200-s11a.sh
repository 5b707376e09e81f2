#!/usr/bin/env bash
# Session 11, call a (about 9 minutes): first GPU run of the session's
# switches, both off by default: FT_DECODE_MEGA (one persistent kernel per
# one-token BF16 layer, issue 21) and FT_VARLEN_CONTIG (packed prefill
# attention over the forward's own k/v rows, issue 15). Their GPU tests, then
# A/B of the resident decode step and run-model, and of 64 x 512 packed.
# Usage (repo root, GPU machine): bash bench/h200-s11a.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=530
compile_tests kernels/cudabackend models/all
build_cuda
wait
MT=240 make_models
export FT_KERNEL_CACHE=$PWD/bin/kernels
log tests
TT=200 runt mega cudabackend kernels/cudabackend 'TestDecodeMega'
grep -E "decode layer, context" "$out/test-mega.log" | tee -a "$out/summary.txt"
TT=120 runt mega-model all models/all 'TestDecodeMegaModelGPU'
TT=120 runt varlen cudabackend kernels/cudabackend 'TestVarlenContig'
(export FT_VARLEN_CONTIG=1; TT=120 runt varlen-model all models/all 'TestVarlenContigBatchGPU|TestBatchEveryDevice')
cat "$out/tests.txt" | tee -a "$out/summary.txt"
D="--model $m --budgets resident --mode decode --context 512 --iters 20"
one mega0-512 FT_DECODE_MEGA=0 -- $D
one mega1-512 FT_DECODE_MEGA=1 -- $D
rmodel mega0 FT_DECODE_MEGA=0 -- --max-new-tokens 256
rmodel mega1 FT_DECODE_MEGA=1 -- --max-new-tokens 256
P="--budgets resident --model $m --batch 64 --mode prefill --tokens 512 --iters 3 --warmup 1"
one packed-off FT_VARLEN_CONTIG=0 -- $P
one packed-on FT_VARLEN_CONTIG=1 -- $P
one mega1-512b FT_DECODE_MEGA=1 -- $D
one mega1-8k FT_DECODE_MEGA=1 -- --model $m --budgets resident --mode decode --context 8192 --iters 20
one mega0-8k FT_DECODE_MEGA=0 -- --model $m --budgets resident --mode decode --context 8192 --iters 20
finish
