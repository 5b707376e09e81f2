#!/usr/bin/env bash
# Session 20, call a (about 6 minutes): where the time goes now, to pick the
# session's work on the open figures: kernel profiles of the resident FP8
# decode step at 512 (issue 18), the 64 x 512 packed prefill and prefill
# 8,192 (issue 15), and Nsight Compute on one launch of the packed prefill's
# attention (varlen contig wg3) and of the FP8 o/down GEMV.
# Usage (repo root, GPU machine): bash bench/h200-s20a.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=520
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
f8=/tmp/llama3-8b-fp8
(timeout 240 $b make-model --shape llama3-8b --dtype fp8-channel --out $f8 >"$out/make-model-fp8.txt" 2>&1) &
(MT=240 make_models) &
wait
git rev-parse --short HEAD >"$out/commit.txt" 2>/dev/null
nvidia-smi -q -d CLOCK,POWER >"$out/smi.txt" 2>&1
R="--budgets resident"
one f8dec NOOP=1 -- $R --model $f8 --mode decode --context 512 --iters 20
one f8dec-kp NOOP=1 -- $R --model $f8 --mode decode --context 512 --iters 5 --kernel-profile
one packed-kp NOOP=1 -- $R --model $m --batch 64 --mode prefill --tokens 512 --iters 2 --warmup 1 --kernel-profile
one pre8k-kp NOOP=1 -- $R --model $m --mode prefill --tokens 8192 --iters 2 --warmup 1 --kernel-profile
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis"
prof() { # tag kernel-regex skip args...
  left 480 || return
  local tag=$1 k=$2 s=$3; shift 3
  log "ncu $tag"
  timeout 120 ncu --clock-control none -k regex:$k --launch-skip $s --launch-count 1 $S --page details \
    $b bench --device cuda:0 --budgets resident "$@" >"$out/ncu-$tag.txt" 2>&1
}
prof packed-attn attn_varlen_contig 40 --model $m --batch 64 --mode prefill --tokens 512 --iters 1 --warmup 1
prof f8-v gemv_fp8_v 81 --model $f8 --mode decode --context 512 --iters 3 --warmup 1
finish
