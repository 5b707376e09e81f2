#!/usr/bin/env bash
# Session 23, call g (about 4 minutes, the session's last device time): the
# fused gate/up GEMM's epilogue through shared memory (16-byte row-contiguous
# stores, the default now) against its store from the registers
# (FT_SWIGLU_GEMM=direct): the kernel test over both, the GEMM benchmark,
# 64 x 512 and prefill 8,192 forwards interleaved (issue 15).
# Usage (repo root, GPU machine): bash bench/h200-s23g.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=270
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
TT=120 runt fused cudabackend kernels/cudabackend 'TestGateUpSiLUFusedGPU'
cat "$out/tests.txt" | tee -a "$out/summary.txt"
grep -h -B2 -A12 -- '--- FAIL' "$out"/test-*.log | head -30
grep -q -- '--- FAIL\|panic\|timed out' "$out"/test-fused.log && { finish; exit 0; }
log bench
(cd kernels/cudabackend && timeout 60 /tmp/t/cudabackend.test -test.run '^$' -test.bench GateUpSiLU -test.benchtime 20x >"$out/bench-gemm.txt" 2>&1)
grep -E '^Benchmark' "$out/bench-gemm.txt" | tee -a "$out/summary.txt"
log figures
P="--model $m --budgets resident --mode prefill --warmup 1"
for r in a b c; do for v in 1 direct; do one pk-$v-$r FT_SWIGLU_GEMM=$v -- $P --batch 64 --tokens 512 --iters 2; done; done
for r in a b; do for v in 1 direct; do one pf-$v-$r FT_SWIGLU_GEMM=$v -- $P --tokens 8192 --iters 3; done; done
finish
