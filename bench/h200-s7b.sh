#!/usr/bin/env bash
# The seventh 2026-12-01 session's Nsight Compute call (issues 18 and 21):
# the one-token GEMVs of the resident decode step at context 512, FP8
# (u8r1s: gate·up·SiLU, o/down, q/k/v) next to BF16 (gate·up·SiLU, the
# residual o/down, q/k/v), serialized, one launch each, with the memory,
# stall and scheduler sections that say why the FP8 ones stream slower.
# Usage (repo root, GPU machine): bash bench/h200-s7b.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
[ -x $b ] || build_cuda
git rev-parse --short HEAD >"$out/commit.txt" 2>/dev/null
f8=/tmp/llama3-8b-fp8
[ -d $f8 ] || timeout 150 $b make-model --shape llama3-8b --dtype fp8-channel --out $f8 >"$out/make-model.txt" 2>&1
make_models
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables"
prof() { # tag model kernel-regex skip
  left 500 || return
  log "ncu $1"
  timeout 100 ncu --clock-control none -k regex:$3 --launch-skip $4 --launch-count 1 $S --page details \
    $b bench --device cuda:0 --budgets resident --model $2 --mode decode --context 512 --iters 3 --warmup 1 >"$out/ncu-$1.txt" 2>&1
}
prof f8-gateup $f8 gemv_gateup_silu_fp8_u8r1s 40
prof f8-v $f8 gemv_fp8_v_u8r1s 81
prof f8-qkv $f8 gemv3_fp8_u8r1s 40
prof bf-gateup $m gemv_gateup_silu_bf16 40
finish
