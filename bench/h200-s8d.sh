#!/usr/bin/env bash
# Session 8, call d (about 9 minutes): the session's kernels and host fixes,
# first GPU run.
#   - issue 18: TestFP8GEMVRate (event-timed rate of every FP8 GEMV variant
#     and of the BF16 pipe over the same bytes), then the resident FP8 decode
#     step per FT_FP8_VARIANT (u8r1s default, p4s, p4g, p2r2s);
#   - issue 21: TestGEMVBal* (split-K BF16 GEMVs: correctness, graph, rates),
#     then the resident BF16 step and run-model with FT_GEMV unset / bal / bal2;
#   - issue 20: TestAllocHostHugePages, host placement tests, the hybrid
#     decode (budgets 0 and 8 GiB) new against FT_PINNED_HUGE=0 FT_HOST_KV=heap,
#     bench-host --layer on huge-page memory.
# Usage (repo root, GPU machine): bash bench/h200-s8d.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=545
compile_tests kernels/cudabackend models/all runtime/cuda
build_cuda
wait
make_models
f8=/tmp/llama3-8b-fp8
[ -d $f8 ] || timeout 150 $b make-model --shape llama3-8b --dtype fp8-channel --out $f8 >"$out/make-model-fp8.txt" 2>&1
export FT_KERNEL_CACHE=$PWD/bin/kernels
log tests
TT=120 runt f8rate cudabackend kernels/cudabackend 'TestFP8GEMVRate'
TT=120 runt bal cudabackend kernels/cudabackend 'TestGEMVBal'
TT=90 runt baldec all models/all 'TestGEMVBalDecodeGPU'
TT=60 runt huge cuda runtime/cuda 'TestAllocHostHugePages'
TT=120 runt host all models/all 'TestHostPlacementDevice|TestHostMeasuredReplan|TestHostDecodeAllocs'
grep -h 'TB/s' "$out"/test-f8rate.log "$out"/test-bal.log "$out"/test-huge.log 2>/dev/null | cut -c1-220 >"$out/rates.txt"
log ab
F="--budgets resident --mode decode --context 512 --iters 20"
one f8-u8r1s NOOP=1 -- --model $f8 $F
one f8-p4s FT_FP8_VARIANT=p4s -- --model $f8 $F
one f8-p4g FT_FP8_VARIANT=p4g -- --model $f8 $F
one f8-p2r2s FT_FP8_VARIANT=p2r2s -- --model $f8 $F
one bf-def NOOP=1 -- --model $m $F
one bf-bal FT_GEMV=bal -- --model $m $F
one bf-bal2 FT_GEMV=bal2 -- --model $m $F
rmodel def NOOP=1 -- --max-new-tokens 256
rmodel bal FT_GEMV=bal -- --max-new-tokens 256
hyb() { # tag env...
  left || { echo "hyb $1: skipped (time)" | tee -a "$out/summary.txt"; return; }
  local tag=$1; shift; log "hyb $tag"
  env FT_TRACE=1 GODEBUG=gctrace=1 "$@" timeout 100 $b bench --device cuda:0 --model $m --budgets 0,8GiB --mode decode --iters 5 --host-threads 16 >"$out/hyb-$tag.txt" 2>&1
  echo "hyb $tag: $(grep -E '^(0\+host|8GiB\+host)' "$out/hyb-$tag.txt" | tr -s ' ' | tr '\n' '|') $(grep -o 'host unit measured [0-9.]* ms' "$out/hyb-$tag.txt" | tr '\n' ' ') | gc $(grep -c '^gc [0-9]' "$out/hyb-$tag.txt") | $(grep -o 'pinned: .*huge pages' "$out/hyb-$tag.txt" | head -1)" | tee -a "$out/summary.txt"
}
hyb new NOOP=1
hyb old FT_PINNED_HUGE=0 FT_HOST_KV=heap
left && { timeout 60 $b bench-host --layer --threads 16 --layer-iters 30 --layer-count 8 >"$out/hl-huge8.txt" 2>&1; grep -E '^(read|weights|layer as placed)' "$out/hl-huge8.txt" | tee -a "$out/summary.txt"; }
one f8-u8r1s-b NOOP=1 -- --model $f8 $F
left 500 && TT=100 runt f8ok cudabackend kernels/cudabackend 'TestFP8GEMVv|TestMatMulNFP8|TestGateUpSiLUFP8|TestMatMulAddFP8'
cat "$out/tests.txt"
finish
