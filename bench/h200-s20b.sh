#!/usr/bin/env bash
# Session 20, call b (about 3 minutes): Nsight Compute's full set on one
# launch of the prefill attention (wg3) at 8,192 positions (issue 15): pipe
# utilisation, warp stall reasons and their SASS locations, to say what
# holds the kernel at ~37% of the tensor cores' rate.
# Usage (repo root, GPU machine): bash bench/h200-s20b.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=300
[ -x $b ] || build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
make_models
git rev-parse --short HEAD >"$out/commit.txt" 2>/dev/null
log ncu
timeout 200 ncu --clock-control none -k regex:attn_prefill_wg3 --launch-skip 40 --launch-count 1 --set full \
  --page details --print-details all $b bench --device cuda:0 --budgets resident --model $m --mode prefill --tokens 8192 \
  --iters 1 --warmup 1 >"$out/ncu-wg3.txt" 2>&1
log ncu-src
timeout 200 ncu --clock-control none -k regex:attn_prefill_wg3 --launch-skip 40 --launch-count 1 --section SourceCounters \
  --section WarpStateStats --page source --print-source sass $b bench --device cuda:0 --budgets resident --model $m \
  --mode prefill --tokens 8192 --iters 1 --warmup 1 >"$out/ncu-wg3-sass.txt" 2>&1
gzip -k "$out/ncu-wg3-sass.txt"
finish
