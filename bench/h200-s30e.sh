#!/usr/bin/env bash
# Session 30, call e (the session's last device seconds): issue 18's 8 GiB
# FP8 row, which s30d measured at 1.106 × its plan's floor (2.62 ms eager
# through the engine against 2.36) where s30c had 1.079 (2.61 against
# 2.42): eager, and with --unit-graphs (each layer's one-token forward
# replayed as a graph of its own), interleaved.
# Usage (repo root, GPU machine): bash bench/h200-s30e.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=250
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
make_fp8
log bench
G="--model $f8 --budgets 8GiB --mode decode --context 512 --iters 10"
for r in a b; do
  one f8-8g-$r -- $G
  one f8-8g-ug-$r -- $G --unit-graphs
done
finish
