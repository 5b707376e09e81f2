#!/usr/bin/env bash
# Session 30, call d: the cluster twins of the decode attention and the
# split argmax declared for dependent launch (dependentLaunchKernels had
# missed them: s30b's trace had the attention's blocks start ~0.8 µs after
# the RoPE kernel ended and s30a's the argmax ~3.7 µs after the LM head),
# and the early RoPE trigger again (FT_ROPE_EARLY=1; s30b ran it without
# dependent launch for the RoPE kernel itself). (1) tests:
# TestDependentLaunchDecodeKernels, TestDecodeClusterGPU,
# TestRoPEStoreEarlyGPU, argmax and capture tests; models/all
# GPU/golden/batch and FP8 (FP8 also with FT_ROPE_EARLY=1). (2) FP8 step at
# 512, two interleaved rounds: default, FT_ROPE_EARLY=1, and without the
# push merge once; BF16 at 512 both ways; FP8 at 2,000; the 8 GiB FP8 row;
# the HBM rate of the machine (BenchmarkCopyD2D) and the clocks under load.
# (3) a traced step (default, or early where it was faster).
# Usage (repo root, GPU machine): bash bench/h200-s30d.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=520
start_call kernels/cudabackend models/all bench
make_fp8
log tests
TT=150 runt kern cudabackend kernels/cudabackend 'TestDependentLaunchDecodeKernels|TestDecodeClusterGPU|TestRoPEStoreEarlyGPU|TestRoPEStoreKV|Argmax|TestEnvSwitch|TestCapturedStep|TestDecodePipeCapturedStep'
TT=150 runt models all models/all 'GPU|TestGolden|TestBatch'
TT=60 runt models-fp8 all models/all 'FP8'
FT_ROPE_EARLY=1 TT=60 runt models-fp8-early all models/all 'FP8|TestGolden'
tests_done || { finish; exit 0; }
log d2d
(cd bench && timeout 120 /tmp/t/bench.test -test.run '^$' -test.bench 'CopyD2D$' -test.benchtime 20x >"$out/d2d.txt" 2>&1)
grep -E "CopyD2D" "$out/d2d.txt" | head -3 >>"$out/summary.txt"
R="--budgets resident --mode decode --context 512"
log bench
for r in a b; do
  one f8-$r -- --model $f8 $R --iters 20
  one f8-early-$r FT_ROPE_EARLY=1 -- --model $f8 $R --iters 20
done
one f8-pull FT_DECODE_CLUSTER_PUSH=0 -- --model $f8 $R --iters 20
one f8-c -- --model $f8 $R --iters 20
one f8-early-c FT_ROPE_EARLY=1 -- --model $f8 $R --iters 20
one bf -- --model $m $R --iters 20
one bf-early FT_ROPE_EARLY=1 -- --model $m $R --iters 20
one f8-2k -- --model $f8 --budgets resident --mode decode --context 2000 --iters 20
one f8-8g -- --model $f8 --budgets 8GiB --mode decode --context 512 --iters 10
rmodel bf -- --max-new-tokens 256
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu --format=csv >>"$out/summary.txt" 2>&1
o=$(cd "$out" && pwd)
if left 360; then
  log traced
  BT=200 one f8-traced FT_BLOCK_TRACE=$o/trace.txt -- --model $f8 $R --iters 10
  grep -E "^# " "$o/trace.txt" | head -14 >>"$out/summary.txt"
fi
finish
