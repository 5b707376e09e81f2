#!/usr/bin/env bash
# Session 23, call b (about 4 minutes): the fused gate/up GEMM in both
# forms (FT_SWIGLU_GEMM=1 plain, =2 clusters of two blocks sharing the
# weight tiles by TMA multicast): tests, the GEMM benchmark over 20
# iterations (long enough for the power cap), prefill 8,192 and 64 x 512
# with 0, 1, 2 interleaved (issue 15).
# Usage (repo root, GPU machine): bash bench/h200-s23b.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=400
compile_tests kernels/cudabackend
build_cuda() {  # lib.sh's with more time: s23b's first try ran past 170 s on a fresh machine
  log build
  timeout 280 make build-cuda >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; finish; exit 1; }
}
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
(MT=240 make_models) &
wait
log tests
TT=200 runt swiglu cudabackend kernels/cudabackend 'TestGateUpSiLUFusedGPU'
cat "$out/tests.txt" | tee -a "$out/summary.txt"
grep -h -B2 -A12 -- '--- FAIL' "$out"/test-*.log | head -40
grep -q -- '--- FAIL\|panic\|timed out' "$out/test-swiglu.log" && { finish; exit 0; }
log bench
(cd kernels/cudabackend && timeout 120 /tmp/t/cudabackend.test -test.run '^$' -test.bench GateUpSiLU -test.benchtime 20x >"$out/bench-gemm.txt" 2>&1)
grep -E '^Benchmark' "$out/bench-gemm.txt" | tee -a "$out/summary.txt"
log figures
P="--model $m --budgets resident --mode prefill --warmup 1"
one pk-c2-kp FT_SWIGLU_GEMM=2 -- $P --batch 64 --tokens 512 --iters 1 --kernel-profile
grep -E 'gemm_swiglu|cublasLt|silu' "$out/pk-c2-kp.txt" | tee -a "$out/summary.txt"
for r in a b; do for v in 2 1 0; do one pf-$v-$r FT_SWIGLU_GEMM=$v -- $P --tokens 8192 --iters 3; done; done
for r in a b; do for v in 2 1 0; do one pk-$v-$r FT_SWIGLU_GEMM=$v -- $P --batch 64 --tokens 512 --iters 2; done; done
finish
