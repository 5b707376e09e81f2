#!/usr/bin/env bash
# Session 29, call f (the last ~110 s of device time, on s29e's warm
# machine): the FP8 step at 512 with the cluster twins' new default (8
# splits from 257 rows), three rounds.
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=100
BUILD_T=90 build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
R="--budgets resident --mode decode --context 512"
for r in a b c; do one f8-$r -- --model $f8 $R --iters 20; done
finish
