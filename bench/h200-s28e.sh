#!/usr/bin/env bash
# Session 28, call e (the session's last device time, ~420 s): (1) tests:
# TestGateUpPrefetch (the o projection's prefetching twin gives the same
# bits and takes the hint), the FP8 models' tests with
# FT_GATEUP_PREFETCH=2048; (2) the resident FP8 step at 512 (s28d: 2.54,
# 2.55 ms) with FT_GATEUP_PREFETCH=1024, 2048, 4096 bytes of each of
# gate·up's first-tile rows asked of L2 by the o projection's blocks while
# they wait for the attention (s28d's trace: HBM carries only o's 16.8 MB
# and the 2 MB of KV in the ~11 µs of RoPE and attention), interleaved
# twice; (3) BF16 at 512 with s2w8h1tp (the short-cache default now)
# against s3w4h1tp, twice; (4) the 8 GiB FP8 row.
# Usage (repo root, GPU machine): bash bench/h200-s28e.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=390
start_call kernels/cudabackend models/all
make_fp8
log tests
TT=60 runt pf cudabackend kernels/cudabackend 'TestGateUpPrefetch|TestFP8PersistGrid|TestContigPipeFor'
FT_GATEUP_PREFETCH=2048 TT=90 runt models-pf all models/all 'FP8'
tests_done
log figures
R="--budgets resident --mode decode --context 512 --iters 20"
for r in a b; do
  one f8-$r -- --model $f8 $R
  one f8-pf1k-$r FT_GATEUP_PREFETCH=1024 -- --model $f8 $R
  one f8-pf2k-$r FT_GATEUP_PREFETCH=2048 -- --model $f8 $R
  one f8-pf4k-$r FT_GATEUP_PREFETCH=4096 -- --model $f8 $R
done
for r in a b; do
  one bf-$r -- --model $m $R
  one bf-s3w4-$r FT_DECODE_VARIANT=s3w4h1tp -- --model $m $R
done
one f8-8g -- --model $f8 --budgets 8GiB --mode decode --context 512 --iters 10
finish
