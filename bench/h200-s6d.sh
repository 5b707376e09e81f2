#!/usr/bin/env bash
# The sixth 2026-12-01 session's closing GPU call (about 7 minutes): GPU
# tests of the changed defaults (wg3 prefill attention, the one-op host
# layer) end to end over the fixture families, then the figures with the
# committed defaults: prefill 8,192 and 64 × 512 packed, the FP8 prefill
# ratio, decode 512 / run-model. bench/h200-s6e.sh follows with the hybrid
# plans.
# Usage (repo root, GPU machine): bash bench/h200-s6d.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=520
f8=/tmp/llama3-8b-fp8
build_cuda
compile_tests kernels/cudabackend models/all
log make-models
make_models
[ -d $f8 ] || timeout 90 $b make-model --shape llama3-8b --dtype fp8-channel --out $f8 >"$out/make-fp8.txt" 2>&1
wait
export FT_KERNEL_CACHE=$PWD/bin/kernels
log tests
TT=240 runt models all models/all 'TestFamiliesEveryDevice|TestBatchEveryDevice|TestHostPlacementDevice|TestHostMeasuredReplan|TestMoEEveryDevice|TestFP8Checkpoints|TestFusedDecodeSwitchesGPU' &
TT=120 runt wg3 cudabackend kernels/cudabackend 'TestPrefillWGModule|TestPrefillWG3Quick|TestChoosePrefillVariant' &
wait
cat "$out/tests.txt"; grep -h -B2 -A8 -E '^\s*--- FAIL|panic' "$out"/test-*.log | grep -v -- '--- PASS' | head -40
log benches
R="--budgets resident"; BT=60
P8="$R --model $m --mode prefill --tokens 8192 --iters 2 --warmup 1"
PK="$R --model $m --batch 64 --mode prefill --tokens 512 --iters 2 --warmup 1"
one pre8k NOOP=1 -- $P8
one pre8k-wg FT_PREFILL_VARIANT=wg -- $P8
one pre8k-b NOOP=1 -- $P8
one packed NOOP=1 -- $PK
one pre2k NOOP=1 -- $R --model $m --mode prefill --tokens 2048 --iters 3 --warmup 1
one fp8pre NOOP=1 -- $R --model $f8 --mode prefill --tokens 2048 --iters 3 --warmup 1
one pre2k-b NOOP=1 -- $R --model $m --mode prefill --tokens 2048 --iters 3 --warmup 1
one d512 NOOP=1 -- $R --model $m --mode decode --context 512 --iters 20
ids=37,235,396,72,255,393,203,133,335,448,144,129
left && timeout 40 $b run-model --model $m --device cuda:0 --token-ids $ids --max-new-tokens 256 --ignore-eos 2>&1 | tail -1 | sed 's/^/run-model: /' | tee -a "$out/summary.txt"
finish
