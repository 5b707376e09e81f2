#!/usr/bin/env bash
# Session 27, call e: argmax_rows_split (ArgmaxRows over many blocks a row,
# argmax_feed's last-block scheme shared): its tests and the feed's, the
# captured step; then the resident decode steps at 512 (FP8, BF16: s27c
# plain 2.73 and 4.15 ms), batch 64 decode at 512 (ArgmaxRows of 64 rows a
# step), run-model, and the FP8 step traced again (FT_BLOCK_TRACE now keeps
# its times in shared memory).
# Usage (repo root, GPU machine): bash bench/h200-s27e.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=330
start_call kernels/cudabackend
make_fp8
o=$(cd "$out" && pwd)
TT=100 runt argmax cudabackend kernels/cudabackend 'Argmax|TestCapturedStep|Feed'
tests_done || { finish; exit 0; }
R="--budgets resident --mode decode --context 512 --iters 20"
one f8-a -- --model $f8 $R
one bf-a -- --model $m $R
one f8-b -- --model $f8 $R
one bf-b -- --model $m $R
rmodel bf -- --max-new-tokens 256
one b64 -- --model $m --budgets resident --batch 64 --context 512 --iters 10
BT=150 one f8-traced FT_BLOCK_TRACE=$o/trace-f8.txt -- --model $f8 --budgets resident --mode decode --context 512 --iters 10
finish
