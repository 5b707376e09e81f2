#!/usr/bin/env bash
# Session 22, call f (about 4 minutes): variant wg9f (wg9o without the
# turns between the consumers; s22e: wg9o 47.6 ms of attention at prefill
# 8,192 against wg6's 41.3, Nsight Compute: the consumers' largest stall
# the turn barriers): its tests (wg6's outputs bit for bit), kernel tables
# at prefill 8,192 and 64 x 512 packed against wg9o and wg6 (issue 15).
# Usage (repo root, GPU machine): bash bench/h200-s22f.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=250
compile_tests kernels/cudabackend
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
(MT=240 make_models) &
wait
git rev-parse --short HEAD >"$out/commit.txt" 2>/dev/null
log tests
TT=150 runt wg9 cudabackend kernels/cudabackend 'TestPrefillWGModule|TestPrefillWG9Quick'
cat "$out/tests.txt" | tee -a "$out/summary.txt"
grep -h -B2 -A12 -- '--- FAIL' "$out"/test-*.log | head -40
grep -q 'panic\|timed out' "$out/test-wg9.log" && { finish; exit 0; }
log figures
P="--model $m --budgets resident --mode prefill --warmup 1"
for v in wg9f wg9o wg6; do one pf-$v-kp FT_PREFILL_VARIANT=$v -- $P --tokens 8192 --iters 1 --kernel-profile; done
for v in wg9f wg6; do one pk-$v-kp FT_PREFILL_VARIANT=$v -- $P --batch 64 --tokens 512 --iters 1 --kernel-profile; done
for v in wg9f wg6; do one pf-$v FT_PREFILL_VARIANT=$v -- $P --tokens 8192 --iters 3; done
finish
