#!/usr/bin/env bash
# The seventh 2026-12-01 session's closing call (about 8 minutes): GPU tests
# of the new defaults (software-pipelined one-token GEMVs, FP8 GEMVs adding
# into the residual) end to end, then the figures: run-model 256 tokens,
# decode 512 and 8,192 (graph), FP8 decode 512, prefill 8,192 and 64 × 512
# packed, and the hybrid plans (bench rows and run-model medians).
# Usage (repo root, GPU machine): bash bench/h200-s7e.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=560
f8=/tmp/llama3-8b-fp8
build_cuda
git rev-parse --short HEAD >"$out/commit.txt" 2>/dev/null
compile_tests kernels/cudabackend models/all
log make-models
make_models
[ -d $f8 ] || timeout 90 $b make-model --shape llama3-8b --dtype fp8-channel --out $f8 >"$out/make-fp8.txt" 2>&1
wait
export FT_KERNEL_CACHE=$PWD/bin/kernels
log tests
TT=200 runt all all models/all 'TestFusedDecodeSwitchesGPU|TestFamiliesEveryDevice|TestBatchEveryDevice|TestFP8AddDecodeGPU|TestFP8Checkpoints|TestHostPlacementDevice|TestHostMeasuredReplan' &
TT=150 runt cb cudabackend kernels/cudabackend 'TestGEMVPipeBitIdentical|TestGEMVPipeFromEnv|TestCapturedStep|TestDecodePipeCapturedStep|TestTunedGEMMReuseAndCapture|TestMatMulAddFP8' &
wait
cat "$out/tests.txt"; grep -h -B2 -A8 -E '^\s*--- FAIL|panic' "$out"/test-*.log | grep -v -- '--- PASS' | head -40
log figures
R="--budgets resident"; BT=70
ids=37,235,396,72,255,393,203,133,335,448,144,129
rmodel() { # tag env... -- args
  left || return; local tag=$1; shift; local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" timeout 60 $b run-model --model $m --device cuda:0 --token-ids $ids --ignore-eos "$@" >"$out/rm-$tag.txt" 2>&1
  tail -1 "$out/rm-$tag.txt" | sed "s/^/run-model $tag: /" | tee -a "$out/summary.txt"
}
rmodel r256 NOOP=1 -- --max-new-tokens 256
rmodel r256-persist FT_GEMV=persist -- --max-new-tokens 256
rmodel r256-b NOOP=1 -- --max-new-tokens 256
one d512 NOOP=1 -- $R --model $m --mode decode --context 512 --iters 20
one d8k NOOP=1 -- $R --model $m --mode decode --context 8192 --iters 10 --warmup 2
one f8 NOOP=1 -- $R --model $f8 --mode decode --context 512 --iters 20
one pre8k NOOP=1 -- $R --model $m --mode prefill --tokens 8192 --iters 2 --warmup 1
one packed NOOP=1 -- $R --model $m --batch 64 --mode prefill --tokens 512 --iters 2 --warmup 1
one pre8k-b NOOP=1 -- $R --model $m --mode prefill --tokens 8192 --iters 2 --warmup 1
log hybrid
BT=120
FT_TRACE=1 one hyb NOOP=1 -- --model $m --budgets 0,8GiB --mode decode --iters 5 --host-threads 16
grep -E '^(0|8GiB)\+host' "$out/hyb.txt" | tee -a "$out/summary.txt"
rmodel h0 FT_TRACE=1 -- --max-new-tokens 32 --gpu-budget 0 --host-threads 16
rmodel h8 FT_TRACE=1 -- --max-new-tokens 32 --gpu-budget 8GiB --host-threads 16
finish
