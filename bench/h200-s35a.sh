#!/usr/bin/env bash
# Session 35, call a: the fused gate/up GEMM's epilogue stores (FT_SWIGLU_GEMM
# = 1: 4-byte pairs from the accumulators, shfl: 16 bytes a lane after a quad
# transpose, tma: shared memory and TMA bulk stores). Their kernel test (the
# same bits from each, rows past the output untouched), the GateUpSiLU
# benchmark at 32,768 rows, then issue 15's 64 × 512 packed step with each,
# interleaved, twice; cmd/infer's two tests not re-run on the GPU since s34.
# Usage (repo root, GPU machine): bash bench/h200-s35a.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=560
start_call kernels/cudabackend cmd/infer
log tests
TT=120 runt fused cudabackend kernels/cudabackend 'TestGateUpSiLUFusedGPU|TestDependentLaunchMatchesSources'
tests_done
log gemm-bench
(cd kernels/cudabackend && timeout 120 /tmp/t/cudabackend.test -test.run '^$' -test.bench 'GateUpSiLU/(fused|gemms).*/32768' -test.benchtime 10x >"$out/gemm-bench.txt" 2>&1)
grep -E '^Benchmark' "$out/gemm-bench.txt" | tee -a "$out/summary.txt"
log issue15
P="--model $m --budgets resident --mode prefill --warmup 1"
for r in a b; do
  for v in 1 tma shfl; do
    BT=100 one pk64-$v-$r FT_SWIGLU_GEMM=$v -- $P --batch 64 --tokens 512 --iters 3
  done
done
left 470 && { log infer-tests; TT=80 runt infer infer cmd/infer 'TestKernelsCommand|TestBenchBatchHost'; tests_done; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu --format=csv >>"$out/summary.txt" 2>&1
finish
