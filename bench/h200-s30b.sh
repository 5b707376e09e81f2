#!/usr/bin/env bash
# Session 30, call b: the push-merge cluster twins of the short-cache decode
# attention (FT_DECODE_CLUSTER_PUSH=1: each block stores its partials into
# the blocks that own the outputs, one cluster barrier instead of two) and
# the RoPE kernel that lets the attention launch at its start
# (FT_ROPE_EARLY=1): s30a's trace had the attention's blocks start ~2.4 µs
# after the RoPE kernel's wait and ~1.3 µs between a block's last output
# and its end. (1) tests: TestDecodeClusterGPU (the push merge's bits
# against the remote-load merge's), TestRoPEStoreEarlyGPU, the decode and
# capture tests; models/all GPU/golden/batch and FP8 with both switches on.
# (2) the FP8 step at 512, two interleaved rounds: default, push, early,
# both, and both with FT_FP8_XB=1 and FT_GEMV=bal2 (s30a: each ~0.01 ms);
# BF16 and FP8 at 2,000 with and without both; the GPU's clocks. (3) a
# traced step with both.
# Usage (repo root, GPU machine): bash bench/h200-s30b.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=560
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.draw,power.limit,temperature.gpu --format=csv >"$out/clocks.txt" 2>&1
start_call kernels/cudabackend models/all
make_fp8
log tests
TT=150 runt kern cudabackend kernels/cudabackend 'TestDecodeClusterGPU|TestRoPEStoreEarlyGPU|TestRoPEStoreKV|Argmax|TestEnvSwitch|TestCapturedStep|TestContigPipeFor|TestDecodePipePositions|TestDecodePipeCapturedStep'
FT_DECODE_CLUSTER_PUSH=1 FT_ROPE_EARLY=1 TT=150 runt models all models/all 'GPU|TestGolden|TestBatch'
FT_DECODE_CLUSTER_PUSH=1 FT_ROPE_EARLY=1 TT=60 runt models-fp8 all models/all 'FP8'
tests_done || { finish; exit 0; }
R="--budgets resident --mode decode --context 512"
E="FT_DECODE_CLUSTER_PUSH=1 FT_ROPE_EARLY=1"
log bench
for r in a b; do
  one f8-$r -- --model $f8 $R --iters 20
  one f8-push-$r FT_DECODE_CLUSTER_PUSH=1 -- --model $f8 $R --iters 20
  one f8-early-$r FT_ROPE_EARLY=1 -- --model $f8 $R --iters 20
  one f8-both-$r $E -- --model $f8 $R --iters 20
  one f8-all-$r $E FT_FP8_XB=1 FT_GEMV=bal2 -- --model $f8 $R --iters 20
done
one f8-2k -- --model $f8 --budgets resident --mode decode --context 2000 --iters 20
one f8-both-2k $E -- --model $f8 --budgets resident --mode decode --context 2000 --iters 20
one bf -- --model $m $R --iters 20
one bf-both $E -- --model $m $R --iters 20
rmodel bf-both $E -- --max-new-tokens 256
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu --format=csv >>"$out/clocks.txt" 2>&1
cat "$out/clocks.txt" >>"$out/summary.txt"
o=$(cd "$out" && pwd)
if left 400; then
  log traced
  BT=200 one f8-traced $E FT_BLOCK_TRACE=$o/trace.txt -- --model $f8 $R --iters 10
  grep -E "^# " "$o/trace.txt" | head -14 >>"$out/summary.txt"
fi
finish
