#!/usr/bin/env bash
# Session 38, call c: the GPU tests of the packages the last-layer change
# touches, whole: models/all (s38b's op-count failures counted anew),
# models/decoder, offload, session; then, time left, two more default
# 64 × 512 packed runs.
# Usage (repo root, GPU machine): bash bench/h200-s38c.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=470
start_call models/all models/decoder offload session
log tests
TT=180 runt all all models/all '.'
TT=60 runt decoder decoder models/decoder '.'
left 300 && TT=$(( 440 - ($(date +%s) - t0) )) runt offload offload offload '.'
left 400 && TT=$(( 460 - ($(date +%s) - t0) )) runt session session session '.'
tests_done
log issue15
P="--model $m --budgets resident --warmup 1"
for r in d e; do
  BT=40 one pk64-def-$r NOOP=1 -- $P --mode prefill --batch 64 --tokens 512 --iters 6
done
for f in "$out"/pk64-*.txt; do echo "$(basename $f .txt) $(grep -h 'steps ms' $f)"; done >>"$out/summary.txt"
finish
