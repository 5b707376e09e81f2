#!/usr/bin/env bash
# Session 25, call b (about 6 minutes on a fresh machine): Nsight Compute on
# one launch each of the down projection and the gate·up·SiLU GEMV of the
# resident FP8 decode step at 512, the tensor-core variant (mmae) against
# the scalar defaults (p4s, u4r1s): s25a measured mma no faster than the
# scalar kernels though it issues a quarter of their instructions.
# Usage (repo root, GPU machine): bash bench/h200-s25b.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=540
f8=/tmp/llama3-8b-fp8
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
timeout 240 $b make-model --shape llama3-8b --dtype fp8-channel --out $f8 >"$out/make-model-fp8.txt" 2>&1
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables"
prof() { # tag variant kernel-regex skip
  left 500 || return
  local tag=$1 v=$2 k=$3 s=$4
  log "ncu $tag"
  FT_FP8_VARIANT=$v timeout 110 ncu --clock-control none -k regex:$k --launch-skip $s --launch-count 1 $S --page details \
    $b bench --device cuda:0 --budgets resident --model $f8 --mode decode --context 512 --iters 3 --warmup 1 >"$out/ncu-$tag.txt" 2>&1
  grep -E "^  [a-z_0-9]+\(|DRAM Throughput|Memory Throughput|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Issued Warp|No Eligible|Eligible Warps|Warp Cycles Per Issued|Block Limit|L1/TEX Hit|L2 Hit|Executed Ipc A|Mem Busy|Max Bandwidth|Waves Per SM|Dynamic Shared" "$out/ncu-$tag.txt" | sed "s/^/$tag: /" >>"$out/summary.txt"
}
prof down-mmae mmae gemv_fp8_v 81
prof down-auto auto gemv_fp8_v 81
prof gateup-mmae mmae gemv_gateup 40
prof gateup-auto auto gemv_gateup 40
prof qkv-mmae mmae gemv3_fp8 40
finish
