#!/usr/bin/env bash
# The sixth 2026-12-01 session's third GPU call (about 8 minutes): GPU tests
# of wg4 (producer warpgroup + mbarriers + ping-pong prefill attention) and
# of the L2 prefetch inside the latency-bound decode kernels (FT_L2_AHEAD),
# their A/B runs, and the issue figures with the defaults: run-model, decode
# at 8,192, prefill 8,192 and packed, the hybrid plan's per-unit host times.
# Usage (repo root, GPU machine): bash bench/h200-s6c.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=540
build_cuda
compile_tests kernels/cudabackend models/all
log make-models
make_models
for v in wg3 wg4; do FT_TRACE=1 FT_PREFILL_VARIANT=$v timeout 60 $b kernels --out bin/kernels >>"$out/kernels-extra.txt" 2>&1; done
wait
export FT_KERNEL_CACHE=$PWD/bin/kernels
log tests
TT=30 runt wg4quick cudabackend kernels/cudabackend 'TestPrefillWG4Quick' &
TT=60 runt l2ak cudabackend kernels/cudabackend 'TestL2AheadKernels|TestL2AheadRegionErrors' &
TT=90 runt l2ad all models/all 'TestL2AheadDecodeGPU' &
wait
TT=120 runt wg4 cudabackend kernels/cudabackend 'TestPrefillWGModule|TestPrefillVariantOccupancy|(TestPrefillAttentionKernels|TestVarlenPrefillKernels)/.*/^wg4$'
cat "$out/tests.txt"; grep -h -B2 -A8 -E '^\s*--- FAIL|panic|trap' "$out"/test-*.log | grep -v -- '--- PASS' | head -40
log benches
R="--budgets resident"; BT=60
D="$R --model $m --mode decode --context 512 --iters 20"
one d512 NOOP=1 -- $D
one d512-l2a FT_L2_AHEAD=1 -- $D
one d512-b NOOP=1 -- $D
one d512-l2a-b FT_L2_AHEAD=1 -- $D
one d512-l2a-normal FT_L2_AHEAD=normal -- $D
one d512-l2a-32 FT_L2_AHEAD=32,8,8 -- $D
one d512-l2a-attn FT_L2_AHEAD=24,0,0 -- $D
ids=37,235,396,72,255,393,203,133,335,448,144,129
for g in "" 1 "" 1; do
  left && FT_L2_AHEAD=$g timeout 40 $b run-model --model $m --device cuda:0 --token-ids $ids --max-new-tokens 256 --ignore-eos 2>&1 | tail -1 | sed "s/^/run-model FT_L2_AHEAD=$g: /" | tee -a "$out/summary.txt"
done
D8="$R --model $m --mode decode --context 8192 --iters 10 --warmup 2"
one d8k NOOP=1 -- $D8
one d8k-l2a FT_L2_AHEAD=1 -- $D8
P8="$R --model $m --mode prefill --tokens 8192 --iters 2 --warmup 1"
PK="$R --model $m --batch 64 --mode prefill --tokens 512 --iters 2 --warmup 1"
one pre8k-wg4 FT_PREFILL_VARIANT=wg4 -- $P8
one pre8k NOOP=1 -- $P8
one pre8k-wg3 FT_PREFILL_VARIANT=wg3 -- $P8
one pre8k-wg4-b FT_PREFILL_VARIANT=wg4 -- $P8
one packed-wg4 FT_PREFILL_VARIANT=wg4 -- $PK
one packed NOOP=1 -- $PK
one pre8k-wg4-prof FT_PREFILL_VARIANT=wg4 -- $P8 --kernel-profile
log hybrid-timing
left 500 && timeout 60 $b run-model --model $m --device cuda:0 --gpu-budget 0 --host-threads 16 --token-ids $ids --max-new-tokens 32 --ignore-eos --offload-timing >"$out/hybrid-timing.txt" 2>&1
tail -1 "$out/hybrid-timing.txt" | sed 's/^/hybrid run-model budget 0: /' | tee -a "$out/summary.txt"
finish
