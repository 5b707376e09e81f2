#!/usr/bin/env bash
# Session 25, call g (about 5 minutes on a fresh machine): auto now runs mm4
# for o and down and mm2 for q/k/v and gate·up: every FP8 test of the
# backend and the models against it, and the resident FP8 decode step at
# 512 with auto against mm2 everywhere (s25f's best), three rounds
# interleaved, then a kernel profile of one auto step.
# Usage (repo root, GPU machine): bash bench/h200-s25g.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=400
f8=/tmp/llama3-8b-fp8
compile_tests kernels/cudabackend models/all
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
(timeout 240 $b make-model --shape llama3-8b --dtype fp8-channel --out $f8 >"$out/make-model-fp8.txt" 2>&1) &
wait
log tests
TT=200 runt fp8 cudabackend kernels/cudabackend 'FP8|TestCapturedStep'
TT=240 runt models all models/all 'FP8|TestTrained|TestGolden'
tests_done
log figures
R="--budgets resident --mode decode --context 512 --iters 20"
for r in a b c; do for v in auto mm2; do one f8-$v-$r FT_FP8_VARIANT=$v -- --model $f8 $R; done; done
one f8-auto-prof NOOP=1 -- --model $f8 $R --kernel-profile
grep -E "gemv|attn_|rmsnorm|rope|launches" "$out/f8-auto-prof.txt" | head -12 >>"$out/summary.txt"
finish
