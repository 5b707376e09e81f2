#!/usr/bin/env bash
# Session 11, call b (about 8 minutes): FT_DECODE_MEGA again after the launch
# limit went from 24 to 32 arguments (s11a: every launch refused); its GPU
# tests, per-layer time, A/B of the decode step at 512 and 8,192 and of
# run-model; the packed prefill pair again (FT_VARLEN_CONTIG); run-model
# against bench at 8 GiB + host with FT_TOKEN_TRACE if time is left.
# Usage (repo root, GPU machine): bash bench/h200-s11b.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=520
compile_tests kernels/cudabackend models/all
build_cuda
wait
MT=240 make_models
export FT_KERNEL_CACHE=$PWD/bin/kernels
log tests
TT=200 runt mega cudabackend kernels/cudabackend 'TestDecodeMega'
grep -E "decode layer, context|max \|diff\||within" "$out/test-mega.log" | head -20 | tee -a "$out/summary.txt"
TT=120 runt mega-model all models/all 'TestDecodeMegaModelGPU'
cat "$out/tests.txt" | tee -a "$out/summary.txt"
D="--model $m --budgets resident --mode decode --context 512 --iters 20"
one mega1-512 FT_DECODE_MEGA=1 -- $D
one mega0-512 FT_DECODE_MEGA=0 -- $D
rmodel mega1 FT_DECODE_MEGA=1 -- --max-new-tokens 256
rmodel mega0 FT_DECODE_MEGA=0 -- --max-new-tokens 256
one mega1-8k FT_DECODE_MEGA=1 -- --model $m --budgets resident --mode decode --context 8192 --iters 20
P="--budgets resident --model $m --batch 64 --mode prefill --tokens 512 --iters 3 --warmup 1"
one packed-on FT_VARLEN_CONTIG=1 -- $P
one packed-off FT_VARLEN_CONTIG=0 -- $P
one mega1-512b FT_DECODE_MEGA=1 -- $D
rmodel mega1b FT_DECODE_MEGA=1 -- --max-new-tokens 256
sync; echo 3 >/proc/sys/vm/drop_caches
left 430 && RT=90 rmodel rm48 FT_TOKEN_TRACE=1 FT_TRACE=1 -- --max-new-tokens 48 --gpu-budget 8GiB --host-threads 16
HB=8GiB HI=10 HT=90 LEFT=470 hyb b8 FT_TOKEN_TRACE=1
grep -H "token-trace: tokens steady\|token-trace: forwards steady\|host units measured" "$out"/rm-rm48.txt "$out"/hyb-b8.txt >>"$out/summary.txt" 2>/dev/null
tail -3 "$out/summary.txt"
finish
