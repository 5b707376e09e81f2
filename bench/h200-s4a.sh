#!/usr/bin/env bash
# The fourth 2026-12-01 session's second GPU call (under 10 minutes): GPU
# tests of the session's new kernels (decode attention "f" variants, the
# fa2 prefill variant, the fused FP8 MLP, the tuned cuBLASLt GEMMs, the
# early-load GEMVs), then their A/B runs, one line each in summary.txt.
# Runs stop being started once the call's 9-minute mark is near.
# FT_GEMV_PREFETCH (the early weight loads) was removed after this run
# (9deac36): infer now rejects it, so the two runs that set it fail.
# Usage (repo root, GPU machine): bench/h200-s4a.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"; t0=$(date +%s)
log() { echo "== $(date +%T) +$(( $(date +%s) - t0 ))s $*" | tee -a "$out/steps.log"; }
left() { [ $(( $(date +%s) - t0 )) -lt ${1:-520} ]; }
b=bin/infer-cuda; m=/tmp/llama3-8b; ids=37,235,396,72,255,393,203,133,335,448,144,129
log build; timeout 170 make build-cuda >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
log compile-tests
mkdir -p /tmp/t; R=$PWD; C=/usr/local/cuda
export CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -I$R/runtime/cuda/compat -I$C/include" \
  CGO_LDFLAGS="-L$C/lib64 -L$C/lib64/stubs -Wl,--disable-new-dtags,-rpath,$C/lib64:/usr/local/nvidia/lib64" \
  LD_LIBRARY_PATH="$C/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}"
for p in kernels/cudabackend models/all runtime/cuda; do
  timeout 200 go test -tags cuda -c -o /tmp/t/$(basename $p).test ./$p >"$out/compile-$(basename $p).log" 2>&1 &
done; wait
log make-model; timeout 120 $b make-model --shape llama3-8b --out $m >"$out/make-model.txt" 2>&1 &
mm=$!
log tests
runt() { # name binary-dir regex
  (cd $2 && timeout ${4:-200} /tmp/t/$1.test -test.count=1 -test.run "$3" >"$out/test-$1.log" 2>&1); local rc=$?
  echo "test $1 rc=$rc $(grep -cE '^--- FAIL' "$out/test-$1.log") failed" | tee -a "$out/steps.log"
  grep -E '^(--- FAIL|    --- FAIL|panic)' "$out/test-$1.log" | head -20; grep -A8 -- '^--- FAIL' "$out/test-$1.log" | head -40
}
runt cudabackend kernels/cudabackend 'TestDecodeMMA|TestPagedDecodeMMA|TestDecodePipePositions|TestDecodePipeCapturedStep|TestCapturedStep|TestPrefillAttentionKernels|TestVarlenPrefillKernels|TestPrefillVariantOccupancy|TestFP8SiLUQuantRows|TestMLPFP8|TestQuantRowsE4M3|TestMatMulFP8Lt|TestMatMulFP8|TestTunedGEMM|TestMatMul$|TestMatMulAdd|TestEarlyWeights|TestDependentLaunch|TestFP8GEMVv|TestGateUpSiLUFP8|TestMatMulNFP8' 260
runt cuda runtime/cuda 'Gemm|Median' 60
runt all models/all 'TestFP8GEMMPrefill|TestFP8Checkpoints|TestFP8RowsFusedPrefill|TestFP8MLPFusedPrefill|TestBatchEveryDevice|TestFP8FusedDecode|TestEarlyWeights' 150
wait $mm
sed -i 's/"max_position_embeddings": 8192/"max_position_embeddings": 40960/' $m/config.json
one() { # tag env... -- bench args
  left || { echo "$1: skipped (time)" | tee -a "$out/summary.txt"; return; }
  local tag=$1; shift; local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  local f="$out/$tag.txt"
  env "${envs[@]}" timeout 60 $b bench --device cuda:0 --budgets resident "$@" >"$f" 2>&1
  local k r g
  k=$(grep -E '^(attn_|cublas|gemv|fp8|quant|prefill)' "$f" | sort -k3 -nr | head -4 | awk '{printf "%s %s ms; ", $1, $3}')
  r=$(grep -E '^resident' "$f" | awk '{printf "row: %s", $0}' | tr -s ' ')
  g=$(grep replayed "$f" | sed 's/.*device: /graph /')
  echo "$tag: $r $g | $k" | tee -a "$out/summary.txt"
}
log benches
one dec512 NOOP=1 -- --model $m --mode decode --context 512 --iters 20
one dec512-noearly FT_GEMV_PREFETCH=0 -- --model $m --mode decode --context 512 --iters 20
one b64-lt NOOP=1 -- --model $m --batch 64,256 --context 512 --iters 5 --warmup 2
one b64-cublas FT_GEMM=cublas -- --model $m --batch 64,256 --context 512 --iters 5 --warmup 2
FT_TRACE=1 timeout 60 $b bench --model $m --device cuda:0 --budgets resident --batch 64 --context 512 --iters 2 --warmup 1 2>&1 | grep 'BF16 GEMM' >"$out/lt-trace.txt"
one b64-prof NOOP=1 -- --model $m --batch 64 --context 512 --iters 5 --warmup 2 --kernel-profile
one b64-s3w2h1rf FT_DECODE_VARIANT=s3w2h1rf FT_DECODE_SPLITS=1 -- --model $m --batch 64 --context 512 --iters 5 --warmup 2 --kernel-profile
one b64-s6w1h1rf FT_DECODE_VARIANT=s6w1h1rf FT_DECODE_SPLITS=1 -- --model $m --batch 64 --context 512 --iters 5 --warmup 2 --kernel-profile
one dec32k NOOP=1 -- --model $m --mode decode --context 32000 --iters 5 --warmup 1 --kernel-profile
one dec32k-s3w4h1rf FT_DECODE_VARIANT=s3w4h1rf -- --model $m --mode decode --context 32000 --iters 5 --warmup 1 --kernel-profile
one dec8k NOOP=1 -- --model $m --mode decode --context 8192 --iters 5 --warmup 1
one dec8k-s3w4h1rf FT_DECODE_VARIANT=s3w4h1rf -- --model $m --mode decode --context 8192 --iters 5 --warmup 1
one pre8k NOOP=1 -- --model $m --mode prefill --tokens 8192 --iters 2 --warmup 1 --kernel-profile
one pre8k-fa2 FT_PREFILL_VARIANT=fa2 -- --model $m --mode prefill --tokens 8192 --iters 2 --warmup 1 --kernel-profile
one pre8k-cublas FT_GEMM=cublas -- --model $m --mode prefill --tokens 8192 --iters 2 --warmup 1
one packed NOOP=1 -- --model $m --batch 64 --mode prefill --tokens 512 --iters 2 --warmup 1
one packed-fa2 FT_PREFILL_VARIANT=fa2 -- --model $m --batch 64 --mode prefill --tokens 512 --iters 2 --warmup 1
one pre2k NOOP=1 -- --model $m --mode prefill --tokens 2048 --iters 3 --warmup 1
left 480 && timeout 30 $b run-model --model $m --device cuda:0 --token-ids $ids --max-new-tokens 256 --ignore-eos 2>&1 | tail -1 | tee -a "$out/summary.txt"
rm -rf $m; f8=/tmp/llama3-8b-fp8
left 470 && { log make-fp8; timeout 90 $b make-model --shape llama3-8b --dtype fp8-channel --out $f8 >"$out/make-fp8.txt" 2>&1; }
one fp8pre NOOP=1 -- --model $f8 --mode prefill --tokens 2048 --iters 3 --warmup 1 --kernel-profile
one fp8pre-nofuse FT_FP8_FUSE=0 -- --model $f8 --mode prefill --tokens 2048 --iters 3 --warmup 1
one fp8dec NOOP=1 -- --model $f8 --mode decode --context 512 --iters 20
one fp8dec-noearly FT_GEMV_PREFETCH=0 -- --model $f8 --mode decode --context 512 --iters 20
log done
