#!/usr/bin/env bash
# Session 31, call b: issue 18's figures at one commit, on one machine:
# the FP8 tests (both checkpoint layouts, the agreement figures, the idle
# step graph); the HBM rate (BenchmarkCopyD2D); the resident FP8 step at
# 512; FP8 decode at 512 everything streamed and under 8 GiB; FP8 and BF16
# prefill 2,048 resident; the 8 GiB row once more at the end.
# Usage (repo root, GPU machine): bash bench/h200-s31b.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=540
start_call models/all bench
make_fp8
log tests
TT=90 runt models-fp8 all models/all 'FP8|IdleStep'
tests_done || { finish; exit 0; }
log d2d
(cd bench && timeout 120 /tmp/t/bench.test -test.run '^$' -test.bench 'CopyD2D$' -test.benchtime 20x >"$out/d2d.txt" 2>&1)
grep -E "CopyD2D" "$out/d2d.txt" | head -3 >>"$out/summary.txt"
log bench
one f8 -- --model $f8 --budgets resident --mode decode --context 512 --iters 20
BT=180 one f8-stream -- --model $f8 --budgets 0,8GiB --mode decode --context 512 --iters 10
one f8-prefill -- --model $f8 --budgets resident --mode prefill --tokens 2048 --iters 5
one bf-prefill -- --model $m --budgets resident --mode prefill --tokens 2048 --iters 5
one f8-8g -- --model $f8 --budgets 8GiB --mode decode --context 512 --iters 10
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu --format=csv >>"$out/summary.txt" 2>&1
finish
