#!/usr/bin/env bash
# The sixth 2026-12-01 session's Nsight Compute call (about 4 minutes): the
# default prefill attention (wg3) at 8,192 tokens and the default decode
# attention (s3w4h1t) at context 512, one layer each, serialized, with the
# stall and scheduler sections that say where each waits.
# Usage (repo root, GPU machine): bash bench/h200-s6f.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
[ -x $b ] || build_cuda
make_models
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis"
log ncu-prefill
timeout 150 ncu --clock-control none -k regex:attn_prefill_wg3_d128 --launch-skip 40 --launch-count 1 $S --page details \
  $b bench --device cuda:0 --budgets resident --model $m --mode prefill --tokens 8192 --iters 1 --warmup 1 >"$out/ncu-wg3.txt" 2>&1
log ncu-decode
timeout 120 ncu --clock-control none -k regex:attn_decode_pipe_d128_s3w4h1t --launch-skip 200 --launch-count 1 $S --page details \
  $b bench --device cuda:0 --budgets resident --model $m --mode decode --context 512 --iters 3 --warmup 1 >"$out/ncu-dec512.txt" 2>&1
finish
