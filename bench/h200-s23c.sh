#!/usr/bin/env bash
# Session 23, call c (about 5 minutes): the fused gate/up GEMM as the
# default (FT_SWIGLU_GEMM=0 turns it off): its kernel test, the model
# tests over the fixtures on the GPU (the fused GEMM in a Qwen2 batch with
# prefills of 300 and 260 tokens, the batched and merged-GEMM tests), the
# GEMM benchmark, then prefill 8,192 and 64 x 512 with and without it,
# interleaved, and a kernel table of each default forward (issue 15).
# Usage (repo root, GPU machine): bash bench/h200-s23c.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=420
compile_tests kernels/cudabackend models/all
build_cuda() {  # lib.sh's with more time: s23b's first try ran past 170 s on a fresh machine
  log build
  timeout 280 make build-cuda >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; finish; exit 1; }
}
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
(MT=240 make_models) &
wait
log tests
TT=150 runt swiglu cudabackend kernels/cudabackend 'TestGateUpSiLUFusedGPU'
TT=200 runt models all models/all 'GPU|TestBatch|TestGolden'
cat "$out/tests.txt" | tee -a "$out/summary.txt"
grep -h -B2 -A12 -- '--- FAIL' "$out"/test-*.log | head -40
grep -h 'gemm_swiglu_bf16:\|qwen2: ' "$out"/test-*.log | tee -a "$out/summary.txt"
grep -q -- '--- FAIL\|panic\|timed out' "$out"/test-*.log && { finish; exit 0; }
log bench
(cd kernels/cudabackend && timeout 120 /tmp/t/cudabackend.test -test.run '^$' -test.bench GateUpSiLU -test.benchtime 20x >"$out/bench-gemm.txt" 2>&1)
grep -E '^Benchmark' "$out/bench-gemm.txt" | tee -a "$out/summary.txt"
log figures
P="--model $m --budgets resident --mode prefill --warmup 1"
one pf-kp -- $P --tokens 8192 --iters 1 --kernel-profile
one pk-kp -- $P --batch 64 --tokens 512 --iters 1 --kernel-profile
grep -E 'gemm_swiglu|cublas|silu|attn|rmsnorm|rope' "$out/pf-kp.txt" "$out/pk-kp.txt" | tee -a "$out/summary.txt"
for r in a b c; do for v in 1 0; do one pf-$v-$r FT_SWIGLU_GEMM=$v -- $P --tokens 8192 --iters 3; done; done
for r in a b c; do for v in 1 0; do one pk-$v-$r FT_SWIGLU_GEMM=$v -- $P --batch 64 --tokens 512 --iters 2; done; done
finish
