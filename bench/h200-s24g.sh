#!/usr/bin/env bash
# Session 24, call g (about 4 minutes on a fresh machine, the session's last
# device time): the fused gate/up GEMM's tile-order group (FT_FUSED_GROUP:
# row tiles a group, the file's 16 by default) at 8, 16, 32 and 64: its
# kernel test with groups of 8, then 64 x 512 forwards interleaved over the
# four and prefill 8,192 with each (issue 15: every GEMM runs at the 700 W
# cap, so DRAM traffic saved by the order might buy clock).
# Usage (repo root, GPU machine): bash bench/h200-s24g.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=230
compile_tests kernels/cudabackend
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
(MT=240 make_models) &
wait
log tests
FT_FUSED_GROUP=8 TT=60 runt swiglu8 cudabackend kernels/cudabackend 'TestGateUpSiLUFusedGPU|TestGemmFusedDefines'
cat "$out/tests.txt" | tee -a "$out/summary.txt"
grep -h -B2 -A12 -- '--- FAIL' "$out"/test-*.log | head -30
log figures
P="--model $m --budgets resident --mode prefill --warmup 1"
for r in a b; do for g in 16 32 8 64; do one pk-$g-$r FT_FUSED_GROUP=$g -- $P --batch 64 --tokens 512 --iters 2; done; done
for g in 16 32 8 64; do one pf-$g FT_FUSED_GROUP=$g -- $P --tokens 8192 --iters 3; done
finish
