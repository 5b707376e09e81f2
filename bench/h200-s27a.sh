#!/usr/bin/env bash
# Session 27, call a (about 6 minutes on a fresh machine; written in session
# 26 after its device time ran out): what session 26 landed without a GPU
# run, and the decode split chunk for the default: (1) the tensor-core FP8
# GEMVs' tests with every scale tensor followed by NaN (5312e78's fix of
# the scale read past K, nanTailed), the offload engine's unit events
# (TestResidentUnitsRecordNoEvents) and the models' FP8 tests; (2) FP8 at
# an 8 GiB budget (the whole model resident through the engine: 2.93 ms
# against a plan floor of 2.61 in s26e, before resident units stopped
# recording events); (3) run-model, 256 greedy tokens after 12 ids, and
# the resident steps at 512, with FT_DECODE_CHUNK 256 (the default), 128
# and 64 (s26f: 128 beat 256 at 512 by 0.02-0.04 ms; 64 untried).
# Usage (repo root, GPU machine): bash bench/h200-s27a.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=480
start_call kernels/cudabackend models/all offload
make_fp8
log tests
TT=120 runt fp8 cudabackend kernels/cudabackend 'FP8|TestCapturedStep'
TT=120 runt models all models/all 'FP8'
TT=60 runt offload offload offload 'TestResidentUnitsRecordNoEvents|TestOffloadedEqualsResident'
tests_done
log figures
BT=120 one f8-8g -- --model $f8 --budgets 8GiB --mode decode --context 512 --iters 10
grep -E '^8GiB' "$out/f8-8g.txt" >>"$out/summary.txt"
R="--budgets resident --mode decode --context 512 --iters 20"
for c in 256 128 64; do
  rmodel bf-chunk$c FT_DECODE_CHUNK=$c -- --max-new-tokens 256
  one f8-chunk$c FT_DECODE_CHUNK=$c -- --model $f8 $R
  one bf-chunk$c FT_DECODE_CHUNK=$c -- --model $m $R
done
finish
