#!/usr/bin/env bash
# Session 11, calls d and e: the one-kernel decode layer as h4 reorganised it, its files copied in
# from branch h4-mega2 (d: 09549c3, a checkpoint; e: 36f4d4d; f: 0088706, bulk-copy prefetch): its tests, per-layer time and
# phase trace.
# Usage (repo root, GPU machine): bash bench/h200-s11d.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=400
compile_tests kernels/cudabackend
wait
export FT_KERNEL_CACHE=$PWD/bin/kernels
TT=200 runt mega cudabackend kernels/cudabackend 'TestDecodeMega'
grep -E "decode layer|^  |FAIL|diff" "$out/test-mega.log" | grep -v "max |diff| 0$" | head -60
cat "$out/tests.txt"
