#!/usr/bin/env bash
# Session 21, call c (about 6 minutes): variant wg7 (wg6 with the LAZY
# softmax: maxima moved only past a slack of 2^8, row sums on the tensor
# cores), its tests against the CPU reference and wg6, then kernel tables
# and forwards of wg6 and wg7 interleaved at prefill 8,192 and 64 x 512
# packed (issue 15), and Nsight Compute's details of one wg7 launch.
# Usage (repo root, GPU machine): bash bench/h200-s21c.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=420
compile_tests kernels/cudabackend
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
(MT=240 make_models) &
wait
git rev-parse --short HEAD >"$out/commit.txt" 2>/dev/null
log tests
TT=150 runt wg7 cudabackend kernels/cudabackend 'TestPrefillWGModule|TestPrefillWG6Quick|TestPrefillWG7Quick|TestVarlenContigKernels'
cat "$out/tests.txt" | tee -a "$out/summary.txt"
grep -h -B2 -A12 -- '--- FAIL' "$out"/test-*.log | head -60
grep -h 'blocks of\|differ from' "$out"/test-wg7.log | sort | uniq | head -40 | tee -a "$out/summary.txt"
log figures
P="--model $m --budgets resident --mode prefill --warmup 1"
one pf-wg7-kp FT_PREFILL_VARIANT=wg7 -- $P --tokens 8192 --iters 1 --kernel-profile
one pf-wg6-kp FT_PREFILL_VARIANT=wg6 -- $P --tokens 8192 --iters 1 --kernel-profile
one pk-wg7-kp FT_PREFILL_VARIANT=wg7 -- $P --batch 64 --tokens 512 --iters 1 --kernel-profile
one pk-wg6-kp FT_PREFILL_VARIANT=wg6 -- $P --batch 64 --tokens 512 --iters 1 --kernel-profile
for r in a b; do
  one pf-wg7-$r FT_PREFILL_VARIANT=wg7 -- $P --tokens 8192 --iters 3
  one pf-wg6-$r FT_PREFILL_VARIANT=wg6 -- $P --tokens 8192 --iters 3
done
one pk-wg7 FT_PREFILL_VARIANT=wg7 -- $P --batch 64 --tokens 512 --iters 2
one pk-wg6 FT_PREFILL_VARIANT=wg6 -- $P --batch 64 --tokens 512 --iters 2
log ncu
FT_PREFILL_VARIANT=wg7 timeout 100 ncu --clock-control none -k regex:attn_prefill_wg7 --launch-skip 40 --launch-count 1 \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section InstructionStats \
  --section LaunchStats --page details --print-details all $b bench --device cuda:0 --budgets resident --model $m \
  --mode prefill --tokens 8192 --iters 1 --warmup 1 >"$out/ncu-wg7.txt" 2>&1
finish
