#!/usr/bin/env bash
# Session 26, call f (about 7 minutes on a fresh machine): the session's
# last commit on the GPU: go vet -tags cuda, the backend's FP8 tests, the
# models' GPU, batch, golden and FP8 tests; the resident FP8 and BF16
# decode steps at 512 with the decode attention's split chunk at 256 (the
# default) and 128, interleaved; FP8 at 8 GiB with per-layer graphs.
# Usage (repo root, GPU machine): bash bench/h200-s26f.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=470
(test_env; timeout 200 go vet -tags cuda ./kernels/cudabackend/ ./models/all/ >"$out/vet.log" 2>&1; echo "vet rc=$?" >>"$out/summary.txt") &
start_call kernels/cudabackend models/all
make_fp8
log tests
TT=100 runt fp8 cudabackend kernels/cudabackend 'FP8|TestCapturedStep'
TT=150 runt models all models/all 'GPU|FP8|TestBatch|TestGolden'
tests_done
log figures
R="--budgets resident --mode decode --context 512 --iters 20"
for r in a b; do for c in 256 128; do
  one f8-chunk$c-$r FT_DECODE_CHUNK=$c -- --model $f8 $R
  one bf-chunk$c-$r FT_DECODE_CHUNK=$c -- --model $m $R
done; done
BT=120 one f8-8g-ug -- --model $f8 --budgets 8GiB --mode decode --context 512 --iters 10 --unit-graphs
grep -E '^8GiB' "$out/f8-8g-ug.txt" >>"$out/summary.txt"
finish
