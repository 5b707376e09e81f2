#!/usr/bin/env bash
# Session 8, call e (about 8 minutes): the per-shape GEMV picks and the
# closing figures.
#   - tests: the FP8 GEMV tests with FT_FP8_VARIANT=auto (the new default),
#     the decode tests that compare eager and graph, FT_GEMV=mixed;
#   - A/B, interleaved: FP8 auto against u8r1s; BF16 FT_GEMV=mixed (q/k/v on
#     gemv.cu's kernel) against the pipelined default, graph and run-model;
#     the hybrid with the session's host changes against FT_PINNED_HUGE=0
#     FT_HOST_KV=heap, new-old-new;
#   - decode 8,192 with the better BF16 mode.
# Usage (repo root, GPU machine): bash bench/h200-s8e.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=440
compile_tests kernels/cudabackend models/all
build_cuda
wait
make_models
f8=/tmp/llama3-8b-fp8
[ -d $f8 ] || timeout 150 $b make-model --shape llama3-8b --dtype fp8-channel --out $f8 >"$out/make-model-fp8.txt" 2>&1
export FT_KERNEL_CACHE=$PWD/bin/kernels
log tests
TT=100 runt f8 cudabackend kernels/cudabackend 'TestFP8AutoPick|TestFP8GEMVRate|TestFP8GEMVv|TestMatMulNFP8|TestGateUpSiLUFP8|TestMatMulAddFP8'
TT=60 runt gemv cudabackend kernels/cudabackend 'TestGEMVPipeBitIdentical|TestGEMVMixed|TestCapturedStep'
TT=100 runt dec all models/all 'TestFP8AddDecodeGPU|TestGEMVMixedDecodeGPU|TestFusedDecodeSwitchesGPU|TestFP8Checkpoints|TestHostPlacementDevice|TestHostDecodeAllocs'
grep -h 'rate .* auto\|rate .* u8r1s\|rate .* p4s\|rate .* u4r\|rate .* u8r1g' "$out/test-f8.log" | cut -c1-200 >"$out/rates.txt"
log ab
F="--budgets resident --mode decode --context 512 --iters 20"
one f8-auto NOOP=1 -- --model $f8 $F
one f8-u8r1s FT_FP8_VARIANT=u8r1s -- --model $f8 $F
one f8-p4s FT_FP8_VARIANT=p4s -- --model $f8 $F
one bf-mixed FT_GEMV=mixed -- --model $m $F
one bf-pipe NOOP=1 -- --model $m $F
rmodel mixed FT_GEMV=mixed -- --max-new-tokens 256
rmodel pipe NOOP=1 -- --max-new-tokens 256
rmodel mixed-b FT_GEMV=mixed -- --max-new-tokens 256
one f8-auto-b NOOP=1 -- --model $f8 $F
one bf-mixed-b FT_GEMV=mixed -- --model $m $F
hyb() { # tag env...
  left || { echo "hyb $1: skipped (time)" | tee -a "$out/summary.txt"; return; }
  local tag=$1; shift; log "hyb $tag"
  env FT_TRACE=1 GODEBUG=gctrace=1 "$@" timeout 100 $b bench --device cuda:0 --model $m --budgets 0,8GiB --mode decode --iters 5 --host-threads 16 >"$out/hyb-$tag.txt" 2>&1
  echo "hyb $tag: $(grep -E '^(0\+host|8GiB\+host)' "$out/hyb-$tag.txt" | tr -s ' ' | tr '\n' '|') $(grep -o 'host unit measured [0-9.]* ms' "$out/hyb-$tag.txt" | tr '\n' ' ') | gc $(grep -c '^gc [0-9]' "$out/hyb-$tag.txt")" | tee -a "$out/summary.txt"
}
hyb new NOOP=1
hyb old FT_PINNED_HUGE=0 FT_HOST_KV=heap
hyb new-b NOOP=1
hyb kvheap FT_HOST_KV=heap
one bf8k-mixed FT_GEMV=mixed -- --model $m --budgets resident --mode decode --context 8192 --iters 20
one bf8k-pipe NOOP=1 -- --model $m --budgets resident --mode decode --context 8192 --iters 20
left 480 && { timeout 60 $b bench-host --layer --threads 16 --layer-iters 30 --layer-count 8 >"$out/hl-huge8.txt" 2>&1; grep -E '^(read|layer as placed)' "$out/hl-huge8.txt" | tee -a "$out/summary.txt"; }
cat "$out/tests.txt"
finish
