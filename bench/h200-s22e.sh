#!/usr/bin/env bash
# Session 22, call e (about 5 minutes): variant wg9o (wg9t with
# FlashAttention-3's intra-warpgroup overlap: a consumer's softmax of a tile
# while its P·V of the previous runs; s22d: wg9t 47.9 ms of attention at
# prefill 8,192, no faster than wg9's cp.async copies, against wg6's 39.7,
# Nsight Compute: the consumers waiting at the turn barriers): tests
# (wg6's outputs bit for bit), kernel tables at prefill 8,192 and 64 x 512
# packed against wg9t and wg6, forwards interleaved (issue 15).
# Usage (repo root, GPU machine): bash bench/h200-s22e.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=300
compile_tests kernels/cudabackend runtime/cuda
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
(MT=240 make_models) &
wait
git rev-parse --short HEAD >"$out/commit.txt" 2>/dev/null
log tests
TT=60 runt tmap cuda runtime/cuda 'TestTensorMapBF16'
TT=180 runt wg9 cudabackend kernels/cudabackend 'TestPrefillWGModule|TestPrefillWG9Quick|TestVarlenContigKernels'
cat "$out/tests.txt" | tee -a "$out/summary.txt"
grep -h -B2 -A12 -- '--- FAIL' "$out"/test-*.log | head -60
grep -h 'registers\|differ from' "$out"/test-wg9.log | sort | uniq | head -40 | tee -a "$out/summary.txt"
grep -q 'panic\|timed out' "$out/test-wg9.log" && { finish; exit 0; }
log figures
P="--model $m --budgets resident --mode prefill --warmup 1"
for v in wg9o wg9t wg6; do one pf-$v-kp FT_PREFILL_VARIANT=$v -- $P --tokens 8192 --iters 1 --kernel-profile; done
for v in wg9o wg9t wg6; do one pk-$v-kp FT_PREFILL_VARIANT=$v -- $P --batch 64 --tokens 512 --iters 1 --kernel-profile; done
for r in a b; do for v in wg9o wg6; do one pf-$v-$r FT_PREFILL_VARIANT=$v -- $P --tokens 8192 --iters 3; done; done
for v in wg9o wg6; do one pk-$v FT_PREFILL_VARIANT=$v -- $P --batch 64 --tokens 512 --iters 2; done
left 250 && { FT_PREFILL_VARIANT=wg9o timeout 40 ncu --clock-control none -k regex:attn_prefill_wg9o --launch-skip 40 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section InstructionStats --section SchedulerStats \
  --page details --print-details all $b bench --device cuda:0 --budgets resident --model $m \
  --mode prefill --tokens 8192 --iters 1 --warmup 1 >"$out/ncu-wg9o.txt" 2>&1; }
finish
