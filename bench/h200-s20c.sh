#!/usr/bin/env bash
# Session 20, calls c and d (about 8 minutes): the prefill attention variant wg6
# (wg3 with fewer instructions a key tile) on the H200: its tests (bits
# equal to wg3's, the CPU reference, module and occupancy), then prefill
# 8,192 and 64 x 512 packed with wg3 and wg6 interleaved, kernel profiles
# of both, and Nsight Compute's instruction and stall counts of one wg6
# launch at 8,192 (issue 15).
# Usage (repo root, GPU machine): bash bench/h200-s20c.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=540
compile_tests kernels/cudabackend
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
(MT=240 make_models) &
wait
git rev-parse --short HEAD >"$out/commit.txt" 2>/dev/null
log tests
TT=200 runt wg6 cudabackend kernels/cudabackend "${TESTS:-TestPrefillWG6Quick|TestPrefillWG3Quick|TestVarlenContigKernels|TestPrefillAttentionKernels|TestVarlenPrefillKernels|TestPrefillVariantOccupancy|TestPrefillWGModule}"
cat "$out/tests.txt" | tee -a "$out/summary.txt"
grep -h -B2 -A12 -- '--- FAIL' "$out"/test-*.log | head -60
grep -h 'wg6.*blocks of\|outputs differ' "$out"/test-wg6.log | sort | uniq -c | head -20 | tee -a "$out/summary.txt"
log figures
P="--model $m --budgets resident --mode prefill --iters 3 --warmup 1"
one pf-wg3-a FT_PREFILL_VARIANT=wg3 -- $P --tokens 8192
one pf-wg6-a FT_PREFILL_VARIANT=wg6 -- $P --tokens 8192
one pk-wg3-a FT_PREFILL_VARIANT=wg3 -- $P --batch 64 --tokens 512
one pk-wg6-a FT_PREFILL_VARIANT=wg6 -- $P --batch 64 --tokens 512
one pf-wg6-b FT_PREFILL_VARIANT=wg6 -- $P --tokens 8192
one pf-wg3-b FT_PREFILL_VARIANT=wg3 -- $P --tokens 8192
one pk-wg6-kp FT_PREFILL_VARIANT=wg6 -- $P --batch 64 --tokens 512 --iters 1 --kernel-profile
one pf-wg6-kp FT_PREFILL_VARIANT=wg6 -- $P --tokens 8192 --iters 1 --kernel-profile
if left 470; then
  log ncu
  FT_PREFILL_VARIANT=wg6 timeout 100 ncu --clock-control none -k regex:attn_prefill_wg6 --launch-skip 40 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section SourceCounters \
    --section InstructionStats --page details $b bench --device cuda:0 --budgets resident --model $m --mode prefill --tokens 8192 \
    --iters 1 --warmup 1 >"$out/ncu-wg6.txt" 2>&1
  grep -E 'Duration|Pipe Tensor Cycles|Warp Cycles Per Issued|Issued Warp Per|Executed Instructions  ' "$out/ncu-wg6.txt" | tee -a "$out/summary.txt"
fi
finish
