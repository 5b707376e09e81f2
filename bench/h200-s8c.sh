#!/usr/bin/env bash
# Session 8, call c (about 4 minutes): fresh kernel profiles with the
# committed defaults, to pick this session's work: prefill 8,192 and 64 × 512
# packed (issue 15), the resident BF16 and FP8 decode steps at 512 (issues 21
# and 18). Each `one` line is one `infer bench --kernel-profile` run; the
# tables are in the per-run files.
# Usage (repo root, GPU machine): bash bench/h200-s8c.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=400
[ -x $b ] || build_cuda
make_models
f8=/tmp/llama3-8b-fp8
[ -d $f8 ] || timeout 150 $b make-model --shape llama3-8b --dtype fp8-channel --out $f8 >"$out/make-model-fp8.txt" 2>&1
R="--budgets resident"
one pre8k NOOP=1 -- $R --model $m --mode prefill --tokens 8192 --iters 2 --warmup 1 --kernel-profile
one packed NOOP=1 -- $R --model $m --batch 64 --mode prefill --tokens 512 --iters 2 --warmup 1 --kernel-profile
one dec512 NOOP=1 -- $R --model $m --mode decode --context 512 --iters 20 --kernel-profile
one f8dec512 NOOP=1 -- $R --model $f8 --mode decode --context 512 --iters 20 --kernel-profile
finish
