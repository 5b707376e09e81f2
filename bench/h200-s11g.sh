#!/usr/bin/env bash
# Session 11, call g (about 4 minutes): the closing GPU tests after the
# review's fixes: the one-kernel layer as its own module (DecodeMega*), the
# default path after rope_rotate moved to common.cuh (RoPE/QKV kernels, fused
# decode switches), the packed prefill path now on by default (VarlenContig,
# batch on every device), and the offload layer graphs with FT_DECODE_MEGA.
# Usage (repo root, GPU machine): bash bench/h200-s11g.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
compile_tests kernels/cudabackend models/all
wait
export FT_KERNEL_CACHE=$PWD/bin/kernels
log tests
TT=100 runt kern cudabackend kernels/cudabackend 'DecodeMega|VarlenContig|RoPE|QKV'
TT=150 runt model all models/all 'TestDecodeMega|TestBatchEveryDevice|TestVarlenContig|TestFusedDecodeSwitchesGPU'
cat "$out/tests.txt"
grep -E "^\s*--- FAIL|panic" "$out"/test-*.log | head -20
finish
