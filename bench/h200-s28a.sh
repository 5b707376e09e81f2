#!/usr/bin/env bash
# Session 28, call a (written in session 27 after its device time ran
# out): the persistent tensor-core FP8 GEMVs (mp2, mp4; fp8gemvmma.cu's
# fm_persist), never run on a GPU yet. (1) Their tests: every FP8 kernel
# test runs every variant, mp2/mp4 included, against the CPU reference;
# TestFP8PersistBitIdentical against mm2/mm4 bit for bit; the models' FP8
# tests with FT_FP8_PERSIST=all; the default path's model tests (the
# embedding gather and rope_store_bf16 changed too). (2) Their rates at the decode shapes
# (TestFP8GEMVRate; s25e: gate·up mm2 31.23 µs). (3) The resident FP8 step
# at 512 with FT_FP8_PERSIST unset, gateup and all, interleaved twice
# (s27e: 2.69, 2.71 ms), and FT_ROPE_PREFETCH=1024 (the RoPE kernel asks
# L2 for the layer's older KV rows before its wait: s27e's trace has the
# attention at ~9 µs a layer for 2 MB), then one traced step with both
# (s27e's trace: gate·up 40.5 µs a layer on the critical path); and
# FT_DECODE_CHUNK=1024 (one split a KV head at 512: no merge round trip);
# FT_L2_HINT_MB=16/32 with the prefetch (the RoPE kernel, after its work,
# asks L2 for the layer's first gate/up rows while the attention runs).
# Usage (repo root, GPU machine): bash bench/h200-s28a.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=520
start_call kernels/cudabackend models/all
make_fp8
o=$(cd "$out" && pwd)
log tests
TT=150 runt fp8 cudabackend kernels/cudabackend 'Persist|TestFP8GEMVv|TestMatMulNFP8|TestGateUpSiLUFP8|TestNormMatMulNFP8|TestNormGateUpSiLUFP8|Argmax|RoPEStoreKV|TestCapturedStep|TestEmbedding'
TT=120 runt rate cudabackend kernels/cudabackend 'TestFP8GEMVRate'
grep -E "rate (qkv|o|down|gateup) +(bf16pipe|auto|mm|mp)" "$out/test-rate.log" | sed 's/^ *fp8gemvrate_test.go:[0-9]*: //' >>"$out/summary.txt"
TT=150 runt models all models/all 'GPU|TestGolden|TestBatch'
FT_FP8_PERSIST=all TT=150 runt models-mp all models/all 'FP8'
tests_done || { finish; exit 0; }
log figures
R="--budgets resident --mode decode --context 512 --iters 20"
for r in a b; do
  one f8-auto-$r -- --model $f8 $R
  one f8-pgu-$r FT_FP8_PERSIST=gateup -- --model $f8 $R
  one f8-pall-$r FT_FP8_PERSIST=all -- --model $f8 $R
  one f8-rpf-$r FT_ROPE_PREFETCH=1024 -- --model $f8 $R
  one bf-$r -- --model $m $R
  one bf-rpf-$r FT_ROPE_PREFETCH=1024 -- --model $m $R
  one f8-c1024-$r FT_DECODE_CHUNK=1024 -- --model $f8 $R
  one f8-hint16-$r FT_ROPE_PREFETCH=1024 FT_L2_HINT_MB=16 -- --model $f8 $R
  one f8-hint32-$r FT_ROPE_PREFETCH=1024 FT_L2_HINT_MB=32 -- --model $f8 $R
done
BT=150 one f8-traced FT_FP8_PERSIST=gateup FT_ROPE_PREFETCH=1024 FT_BLOCK_TRACE=$o/trace-both.txt -- --model $f8 --budgets resident --mode decode --context 512 --iters 10
finish
