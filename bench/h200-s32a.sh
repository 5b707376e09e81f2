#!/usr/bin/env bash
# Session 32, call a: session 31's untested GPU check (the backend's
# dependent-launch declarations against kernels/cuda/dependent_launch.txt),
# cmd/infer's GPU tests run to their end (s31e stopped them at 100 s), the
# kernel backend's tests, then issue 15's prefill figures on this machine:
# 8,192 tokens and the 64 × 512 packed step, twice each, and one kernel
# table of the packed step.
# Usage (repo root, GPU machine): bash bench/h200-s32a.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=560
start_call kernels/cudabackend cmd/infer
log tests
TT=60 runt pdl cudabackend kernels/cudabackend 'TestDependentLaunchMatchesSources'
TT=240 runt infer infer cmd/infer '.'
tests_done
log issue15
P="--model $m --budgets resident --mode prefill --warmup 1"
for r in a b; do
  BT=90 one pf8k-$r -- $P --tokens 8192 --iters 3
  BT=120 one pk64-$r -- $P --batch 64 --tokens 512 --iters 2
done
BT=120 one pk64-kp -- $P --batch 64 --tokens 512 --iters 1 --kernel-profile
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu --format=csv >>"$out/summary.txt" 2>&1
finish
