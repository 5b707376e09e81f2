#!/usr/bin/env bash
# Session 24, call e (about 5 minutes on a fresh machine): the resident
# decode step at context 512 with the RMSNorms folded into the one-token
# GEMVs (FT_FUSE_NORM=1, BF16 weights only; slower in s4b, before the
# early-loading GEMVs and the later decode changes) against the default,
# interleaved; and the resident FP8 decode step, this session's figure for
# issue 18 (its norms are not folded: the fold takes plain weights only).
# Usage (repo root, GPU machine): bash bench/h200-s24e.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=330
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
f8=/tmp/llama3-8b-fp8
(timeout 240 $b make-model --shape llama3-8b --dtype fp8-channel --out $f8 >"$out/make-model-fp8.txt" 2>&1) &
(MT=240 make_models) &
wait
log figures
R="--budgets resident --mode decode --context 512 --iters 20"
for r in a b; do for v in 1 0; do one bd-$v-$r FT_FUSE_NORM=$v -- --model $m $R; done; done
for r in a b; do one f8-$r NOOP=1 -- --model $f8 $R; done
finish
