#!/usr/bin/env bash
# Session 31, call e (the last device seconds): the GPU tests of the
# packages this session changed, whole (runtime/cuda: the cuBLASLt plans
# with stand-in scale vectors; offload: the engine's nn.Idler; models/all,
# models/decoder, models/generate: the idle step graph and the forward's
# body split out; cmd/infer), then the resident FP8 step and the 8 GiB FP8
# row at the final commit.
# Usage (repo root, GPU machine): bash bench/h200-s31e.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=470
start_call runtime/cuda offload models/all models/decoder models/generate cmd/infer
make_fp8
log tests
for p in runtime/cuda:cuda offload:offload models/decoder:decoder models/generate:generate cmd/infer:infer models/all:all; do
  left 380 || { echo "tests ${p%%:*}: skipped (time)" >>"$out/tests.txt"; continue; }
  TT=100 runt ${p##*:} ${p##*:} ${p%%:*} '.'
done
tests_done
log bench
one f8 -- --model $f8 --budgets resident --mode decode --context 512 --iters 20
one f8-8g -- --model $f8 --budgets 8GiB --mode decode --context 512 --iters 10
finish
