#!/usr/bin/env bash
# Session 28, call b (after s28a's tests pass; within 30 s of it, so that
# the machine is warm and built): the resident decode steps at 512,
# interleaved twice (s27e: FP8 2.69, 2.71 ms; BF16 4.12, 4.11): FP8 with
# FT_FP8_PERSIST=gateup and all (the persistent GEMVs), FT_ROPE_PREFETCH=
# 1024 (the RoPE kernel asks L2 for the older KV rows before its wait:
# s27e's trace has the attention ~9 µs a layer for 2 MB), that with
# FT_L2_HINT_MB=16 and 32 (and the layer's first gate/up rows after its
# work, while the attention runs), FT_DECODE_CHUNK=1024 (one split a KV
# head: no merge); BF16 with and without the prefetch; then one traced FP8
# step with gate·up persistent and the prefetch.
# Usage (repo root, GPU machine): bash bench/h200-s28b.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=540
[ -x $b ] || build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
make_models
make_fp8
o=$(cd "$out" && pwd)
log figures
R="--budgets resident --mode decode --context 512 --iters 20"
for r in a b; do
  one f8-auto-$r -- --model $f8 $R
  one f8-pgu-$r FT_FP8_PERSIST=gateup -- --model $f8 $R
  one f8-pall-$r FT_FP8_PERSIST=all -- --model $f8 $R
  one f8-rpf-$r FT_ROPE_PREFETCH=1024 -- --model $f8 $R
  one f8-hint16-$r FT_ROPE_PREFETCH=1024 FT_L2_HINT_MB=16 -- --model $f8 $R
  one f8-hint32-$r FT_ROPE_PREFETCH=1024 FT_L2_HINT_MB=32 -- --model $f8 $R
  one f8-c1024-$r FT_DECODE_CHUNK=1024 -- --model $f8 $R
  one bf-$r -- --model $m $R
  one bf-rpf-$r FT_ROPE_PREFETCH=1024 -- --model $m $R
done
BT=150 one f8-traced FT_FP8_PERSIST=gateup FT_ROPE_PREFETCH=1024 FT_BLOCK_TRACE=$o/trace-both.txt -- --model $f8 --budgets resident --mode decode --context 512 --iters 10
finish
