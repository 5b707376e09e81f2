#!/usr/bin/env bash
# Session 21, call b (about 4 minutes): Nsight Compute on one wg6 launch at
# 8,192 positions (the details sections, then the SASS source view with
# stall sampling: where the softmax's cycles go), prefill 8,192 forwards
# again, and the 64 x 512 packed step's kernel table with FT_GEMM=lt-sustained
# against the default, interleaved (issue 15).
# Usage (repo root, GPU machine): bash bench/h200-s21b.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=400
[ -x $b ] || build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
MT=240 make_models
git rev-parse --short HEAD >"$out/commit.txt" 2>/dev/null
NB="bench --device cuda:0 --budgets resident --model $m --mode prefill --tokens 8192 --iters 1 --warmup 1"
log ncu-details
timeout 150 ncu --clock-control none -k regex:attn_prefill_wg6 --launch-skip 40 --launch-count 1 --section SpeedOfLight \
  --section ComputeWorkloadAnalysis --section WarpStateStats --section InstructionStats --section LaunchStats \
  --section Occupancy --section SchedulerStats --page details --print-details all $b $NB >"$out/ncu-wg6.txt" 2>&1
log ncu-src
timeout 150 ncu --clock-control none -k regex:attn_prefill_wg6 --launch-skip 40 --launch-count 1 --section SourceCounters \
  --section WarpStateStats --page source --print-source sass $b $NB >"$out/ncu-wg6-sass.txt" 2>&1
gzip -k "$out/ncu-wg6-sass.txt"
log figures
P="--model $m --budgets resident --mode prefill --warmup 1"
one pf-def-c X=1 -- $P --tokens 8192 --iters 3
one pk-def-kp X=1 -- $P --batch 64 --tokens 512 --iters 1 --kernel-profile
one pk-sus-kp FT_GEMM=lt-sustained -- $P --batch 64 --tokens 512 --iters 1 --kernel-profile
one pk-def-b X=1 -- $P --batch 64 --tokens 512 --iters 2
one pk-sus-b FT_GEMM=lt-sustained -- $P --batch 64 --tokens 512 --iters 2
one pf-def-d X=1 -- $P --tokens 8192 --iters 3
finish
