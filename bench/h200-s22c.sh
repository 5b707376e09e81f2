#!/usr/bin/env bash
# Session 22, call c (about 5 minutes): forms of wg9 (s22b: wg9 47.5 ms of
# attention at prefill 8,192 against wg6's 40.4): wg9n (no proxy fence),
# wg9w (no fence, one copying warp), wg9p (the producer fences): tests
# (wg6's outputs bit for bit), kernel tables at prefill 8,192 and 64 x 512
# packed against wg6, Nsight Compute's summary of wg9n and wg6 (issue 15).
# Usage (repo root, GPU machine): bash bench/h200-s22c.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=300
compile_tests kernels/cudabackend
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
(MT=240 make_models) &
wait
git rev-parse --short HEAD >"$out/commit.txt" 2>/dev/null
log tests
TT=180 runt wg9 cudabackend kernels/cudabackend 'TestPrefillWGModule|TestPrefillWG9Quick|TestVarlenContigKernels'
cat "$out/tests.txt" | tee -a "$out/summary.txt"
grep -h -B2 -A12 -- '--- FAIL' "$out"/test-*.log | head -40
grep -h 'registers\|differ from' "$out"/test-wg9.log | sort | uniq | head -40 | tee -a "$out/summary.txt"
log figures
P="--model $m --budgets resident --mode prefill --warmup 1"
for v in wg9n wg9w wg9p wg9 wg6; do one pf-$v-kp FT_PREFILL_VARIANT=$v -- $P --tokens 8192 --iters 1 --kernel-profile; done
for v in wg9n wg9w wg9p wg6; do one pk-$v-kp FT_PREFILL_VARIANT=$v -- $P --batch 64 --tokens 512 --iters 1 --kernel-profile; done
for r in a b; do for v in wg9n wg6; do one pf-$v-$r FT_PREFILL_VARIANT=$v -- $P --tokens 8192 --iters 3; done; done
for v in wg9n wg6; do left 250 || break
FT_PREFILL_VARIANT=$v timeout 40 ncu --clock-control none -k regex:attn_prefill_$v --launch-skip 40 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section InstructionStats --section SchedulerStats \
  --page details --print-details all $b bench --device cuda:0 --budgets resident --model $m \
  --mode prefill --tokens 8192 --iters 1 --warmup 1 >"$out/ncu-$v.txt" 2>&1; done
finish
