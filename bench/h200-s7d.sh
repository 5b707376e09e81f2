#!/usr/bin/env bash
# The seventh 2026-12-01 session's second call, on s7c's machine (its build,
# test binaries and models): the GPU tests s7c meant to run (its runt lines
# lacked the binary name), prefill A/B of wg5 against wg3, run-model with
# FT_GEMV=pipe, and the hybrid plans under the shared-read planner against
# the old model (FT_HOST_DRAM_GBPS=0).
# Usage (repo root, GPU machine): bash bench/h200-s7d.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=560
[ -x $b ] || build_cuda
[ -x /tmp/t/cudabackend.test ] || { compile_tests kernels/cudabackend models/all; wait; }
make_models
export FT_KERNEL_CACHE=$PWD/bin/kernels
log tests
TT=150 runt cb cudabackend kernels/cudabackend 'TestPrefillWG5Quick|TestPrefillWGModule|TestPrefillVariantOccupancy|(TestPrefillAttentionKernels|TestVarlenPrefillKernels)/.*/^wg5$|TestFP8PipeBitIdentical|TestGEMVPipeBitIdentical|TestMatMulAddFP8|TestParseFP8Add|TestFP8GEMVv|TestGateUpSiLUFP8|TestMatMulNFP8' &
TT=150 runt all all models/all 'TestFP8AddDecodeGPU|TestFP8Checkpoints|TestHostPlacementDevice|TestHostMeasuredReplan|TestHostPlacementTiming|TestFusedDecodeSwitchesGPU' &
wait
cat "$out/tests.txt"; grep -h -B2 -A8 -E '^\s*--- FAIL|panic' "$out"/test-*.log | grep -v -- '--- PASS' | head -40
log ab
R="--budgets resident"; BT=70
P8="$R --model $m --mode prefill --tokens 8192 --iters 2 --warmup 1"
one pre8k-wg5 FT_PREFILL_VARIANT=wg5 -- $P8
one pre8k NOOP=1 -- $P8
one pre8k-wg5-b FT_PREFILL_VARIANT=wg5 -- $P8
one pre8k-b NOOP=1 -- $P8
one packed-wg5 FT_PREFILL_VARIANT=wg5 -- $R --model $m --batch 64 --mode prefill --tokens 512 --iters 2 --warmup 1
ids=37,235,396,72,255,393,203,133,335,448,144,129
rmodel() { # tag env... -- args
  left || return; local tag=$1; shift; local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" timeout 60 $b run-model --model $m --device cuda:0 --token-ids $ids --ignore-eos "$@" >"$out/rm-$tag.txt" 2>&1
  tail -1 "$out/rm-$tag.txt" | sed "s/^/run-model $tag: /" | tee -a "$out/summary.txt"
}
rmodel pipe FT_GEMV=pipe -- --max-new-tokens 256
rmodel default NOOP=1 -- --max-new-tokens 256
rmodel pipe-b FT_GEMV=pipe -- --max-new-tokens 256
log hybrid
left 420 && timeout 60 $b bench-host --threads 16 >"$out/bench-host.txt" 2>&1
BT=120
H="--model $m --budgets 0,8GiB --mode decode --iters 5 --host-threads 16"
FT_TRACE=1 one hyb NOOP=1 -- $H
rmodel h0 FT_TRACE=1 -- --max-new-tokens 32 --gpu-budget 0 --host-threads 16
rmodel h8 FT_TRACE=1 -- --max-new-tokens 32 --gpu-budget 8GiB --host-threads 16
one hyb-old FT_HOST_DRAM_GBPS=0 -- $H
finish
