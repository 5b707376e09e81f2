#!/usr/bin/env bash
# Session 23, call a (about 5 minutes): the fused gate/up GEMM with
# silu·mul in its epilogue (FT_SWIGLU_GEMM=1, kernels/cuda/sm90a/extra/
# gemm_swiglu.cu): its tests and the tensor-map test, the GEMM benchmark
# against cuBLASLt's two GEMMs and the silu·mul at 8,192 and 32,768 rows,
# then prefill 8,192 and 64 x 512 with and without it (issue 15).
# Usage (repo root, GPU machine): bash bench/h200-s23a.sh OUTDIR
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
log tests
runt tmap cuda runtime/cuda 'TestTensorMapBF16'
TT=200 runt swiglu cudabackend kernels/cudabackend 'TestGateUpSiLUFusedGPU|TestGateUpSiLUMergedGPU'
cat "$out/tests.txt" | tee -a "$out/summary.txt"
grep -h -B2 -A12 -- '--- FAIL' "$out"/test-*.log | head -40
grep -q -- '--- FAIL\|panic\|timed out' "$out/test-swiglu.log" && { finish; exit 0; }
log bench
(cd kernels/cudabackend && timeout 120 /tmp/t/cudabackend.test -test.run '^$' -test.bench GateUpSiLU -test.benchtime 5x >"$out/bench-gemm.txt" 2>&1)
grep -E '^Benchmark' "$out/bench-gemm.txt" | tee -a "$out/summary.txt"
log figures
P="--model $m --budgets resident --mode prefill --warmup 1"
one pk-fused-kp FT_SWIGLU_GEMM=1 -- $P --batch 64 --tokens 512 --iters 1 --kernel-profile
for r in a b; do for v in 1 0; do one pf-$v-$r FT_SWIGLU_GEMM=$v -- $P --tokens 8192 --iters 3; done; done
for v in 1 0; do one pk-$v FT_SWIGLU_GEMM=$v -- $P --batch 64 --tokens 512 --iters 2; done
finish
