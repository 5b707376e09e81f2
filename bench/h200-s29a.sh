#!/usr/bin/env bash
# Session 29, call a (written in session 28 after its device time ran
# out): where the resident FP8 decode step's time goes at the session-28
# defaults (s28e: 2.51-2.54 ms against issue 18's 2.46; the floor 1.97).
# The figure first (two runs), then Nsight Compute on one launch each of
# the step's kernels (no PDL overlap under ncu: per-kernel DRAM rate,
# occupancy, warp stalls): gate·up (gemv_gateup_silu_fp8_norm_mp2: 32.8
# µs a layer in the step's trace against 28.8 for its bytes), the decode
# attention (s2w8h1tp: 8.4 µs for 2 MB), q/k/v (gemv3_fp8_norm_mp2), o
# (gemv_fp8_v_mp4), down (gemv_fp8_v_mm4) and the RoPE + KV store.
# It also runs the block trace with the phase marks session 28 added
# without a GPU run (FT_TRACE_MARK: test it first if the traced run fails).
# Usage (repo root, GPU machine): bash bench/h200-s29a.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=540
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
(MT=240 make_fp8) &
wait
git rev-parse --short HEAD >"$out/commit.txt" 2>/dev/null
R="--budgets resident --mode decode --context 512"
one f8-a -- --model $f8 $R --iters 20
one f8-b -- --model $f8 $R --iters 20
# the step traced, with the phase marks (FT_TRACE_MARK, untested on a GPU
# when written: check trace.txt's attention and fm_persist lines carry m0..)
o=$(cd "$out" && pwd)
BT=150 one f8-traced FT_BLOCK_TRACE=$o/trace.txt -- --model $f8 $R --iters 10
grep -E "attn_decode|gateup|gemv3|gemv_fp8_v" "$o/trace.txt" | sed -n '1,12p' >>"$out/summary.txt"
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis"
prof() { # tag kernel-regex skip
  left 500 || return
  log "ncu $1"
  timeout 90 ncu --clock-control none -k regex:$2 --launch-skip $3 --launch-count 1 $S --page details \
    $b bench --device cuda:0 --model $f8 $R --iters 3 --warmup 1 >"$out/ncu-$1.txt" 2>&1
  grep -E "DRAM Throughput|Duration|Memory Throughput|Achieved Occupancy|Registers Per|Warp Cycles Per Issued" "$out/ncu-$1.txt" | sed "s/^/$1: /" >>"$out/summary.txt"
}
prof gateup gemv_gateup_silu_fp8_norm_mp2 40
prof attn attn_decode_pipe_d128_s2w8h1tp 40
prof qkv gemv3_fp8_norm_mp2 40
prof o gemv_fp8_v_mp4 40
prof down gemv_fp8_v_mm4 40
prof rope rope_store_bf16 40
finish
