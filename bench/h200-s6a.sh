#!/usr/bin/env bash
# The sixth 2026-12-01 session's first GPU call (about 9 minutes): GPU tests
# of the session's new kernels (wg3 prefill ping-pong, bulk-copy GEMVs,
# tensor-core FP8 GEMVs), then their A/B runs against the defaults, one line
# each in summary.txt.
# Usage (repo root, GPU machine): bash bench/h200-s6a.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
f8=/tmp/llama3-8b-fp8
build_cuda
compile_tests kernels/cudabackend
log make-models
make_models
[ -d $f8 ] || timeout 90 $b make-model --shape llama3-8b --dtype fp8-channel --out $f8 >"$out/make-fp8.txt" 2>&1
FT_TRACE=1 FT_PREFILL_VARIANT=wg3 FT_GEMV=bulk timeout 60 $b kernels --out bin/kernels >"$out/kernels-extra.txt" 2>&1
wait
export FT_KERNEL_CACHE=$PWD/bin/kernels
log tests
TT=30 runt wg3quick cudabackend kernels/cudabackend 'TestPrefillWG3Quick' &
TT=90 runt bulk cudabackend kernels/cudabackend 'TestBulk' &
TT=120 runt fp8 cudabackend kernels/cudabackend 'TestFP8GEMVv|TestMatMulNFP8|TestGateUpSiLUFP8|TestFP8GEMVtcRange' &
wait
TT=120 runt wg3 cudabackend kernels/cudabackend 'TestPrefillWGModule|TestPrefillVariantOccupancy|(TestPrefillAttentionKernels|TestVarlenPrefillKernels)/.*/^wg3$' &
TT=60 runt fp8bw cudabackend kernels/cudabackend 'TestFP8GEMVBandwidth' &
wait
cat "$out/tests.txt"; grep -h -B2 -A8 -E '^\s*--- FAIL' "$out"/test-*.log | grep -v -- '--- PASS' | head -40
grep -h -iE 'GB/s' "$out/test-bulk.log" | head -20 | sed 's/^/readrate: /' | tee -a "$out/summary.txt"
log benches
R="--budgets resident"; BT=60
D="$R --model $m --mode decode --context 512 --iters 20"
one d512 NOOP=1 -- $D
one d512-bulk FT_GEMV=bulk -- $D
one d512-bulk200 FT_GEMV=bulk FT_GEMV_BULK_SMEM=200 -- $D
one d512-b NOOP=1 -- $D
one d512-bulk-prof FT_GEMV=bulk -- $D --kernel-profile
F="$R --model $f8 --mode decode --context 512 --iters 20"
one f8-u8r1s FT_FP8_VARIANT=u8r1s -- $F
one f8-tc8 FT_FP8_VARIANT=tc8 -- $F
one f8-tc4 FT_FP8_VARIANT=tc4 -- $F
one f8-tc8-prof FT_FP8_VARIANT=tc8 -- $F --kernel-profile
P8="$R --model $m --mode prefill --tokens 8192 --iters 2 --warmup 1"
PK="$R --model $m --batch 64 --mode prefill --tokens 512 --iters 2 --warmup 1"
one pre8k NOOP=1 -- $P8
one pre8k-wg3 FT_PREFILL_VARIANT=wg3 -- $P8
one pre8k-b NOOP=1 -- $P8
one pre8k-wg3-b FT_PREFILL_VARIANT=wg3 -- $P8
one packed NOOP=1 -- $PK
one packed-wg3 FT_PREFILL_VARIANT=wg3 -- $PK
ids=37,235,396,72,255,393,203,133,335,448,144,129
for g in "" bulk; do
  left && FT_GEMV=$g timeout 40 $b run-model --model $m --device cuda:0 --token-ids $ids --max-new-tokens 256 --ignore-eos 2>&1 | tail -1 | sed "s/^/run-model FT_GEMV=$g: /" | tee -a "$out/summary.txt"
done
one pre8k-wg3-prof FT_PREFILL_VARIANT=wg3 -- $P8 --kernel-profile
finish
