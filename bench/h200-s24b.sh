#!/usr/bin/env bash
# Session 24, call b (about 4 minutes, warm machine after s24a): s24a's
# figures again, now that infer takes FT_PREFILL_VARIANT=wg6p (s24a's wg6p
# runs were refused by cmd/infer's list): kernel tables of 64 x 512 with wg6
# and wg6p, then 64 x 512 and prefill 8,192 forwards interleaved (issue 15).
# Usage (repo root, GPU machine): bash bench/h200-s24b.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=330
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
MT=240 make_models
log figures
P="--model $m --budgets resident --mode prefill --warmup 1"
for v in wg6 wg6p; do one pk-kp-$v FT_PREFILL_VARIANT=$v -- $P --batch 64 --tokens 512 --iters 1 --kernel-profile; done
for r in a b c; do for v in wg6p wg6; do one pk-$v-$r FT_PREFILL_VARIANT=$v -- $P --batch 64 --tokens 512 --iters 2; done; done
for r in a b; do for v in wg6p wg6; do one pf-$v-$r FT_PREFILL_VARIANT=$v -- $P --tokens 8192 --iters 3; done; done
finish
