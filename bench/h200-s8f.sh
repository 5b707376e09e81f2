#!/usr/bin/env bash
# Session 8, call f (about 3 minutes, the session's last device time): issue
# 21 at context 8,192, where the graph step is 0.03 ms above 1.15 × the
# floor: the decode attention's split size and prefetching variant there,
# interleaved (session 6 had FT_DECODE_CHUNK=64 at 4.64 against 4.67), and
# the GPU tests of the review fixes.
# Usage (repo root, GPU machine): bash bench/h200-s8f.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=200
compile_tests kernels/cudabackend models/all
build_cuda
wait
make_models
export FT_KERNEL_CACHE=$PWD/bin/kernels
TT=40 runt fix cudabackend kernels/cudabackend 'TestGEMVBalBench'
TT=40 runt fixdec all models/all 'TestFP8AddDecodeGPU'
L="--model $m --budgets resident --mode decode --context 8192 --iters 20"
one k8-def NOOP=1 -- $L
one k8-c64 FT_DECODE_CHUNK=64 -- $L
one k8-tf FT_DECODE_VARIANT=s3w4h1tf -- $L
one k8-def-b NOOP=1 -- $L
one k8-c64-b FT_DECODE_CHUNK=64 -- $L
cat "$out/tests.txt"
finish
