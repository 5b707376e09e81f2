#!/usr/bin/env bash
# The fifth 2026-12-01 session's third GPU call (about 8 minutes): GPU tests
# of the session's new kernels (wgmma prefill attention, fused q/k/v + RoPE +
# KV store, the norm in the residual GEMV's last block, the L2 prefetch, the
# transposed decode attention, the split-K filter), then their A/B runs, one
# line each in summary.txt.
# Usage (repo root, GPU machine): bash bench/h200-s5c.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"; t0=$(date +%s)
log() { echo "== $(date +%T) +$(( $(date +%s) - t0 ))s $*" | tee -a "$out/steps.log"; }
left() { [ $(( $(date +%s) - t0 )) -lt ${1:-500} ]; }
b=bin/infer-cuda; m=/tmp/llama3-8b
log build; timeout 170 make build-cuda >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
mkdir -p /tmp/t; R=$PWD; C=/usr/local/cuda
export CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -I$R/runtime/cuda/compat -I$C/include" \
  CGO_LDFLAGS="-L$C/lib64 -L$C/lib64/stubs -Wl,--disable-new-dtags,-rpath,$C/lib64:/usr/local/nvidia/lib64" \
  LD_LIBRARY_PATH="$C/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}"
log compile-tests+make-model
for p in kernels/cudabackend models/all; do
  (timeout 170 go test -tags cuda -c -o /tmp/t/$(basename $p).test ./$p >"$out/compile-$(basename $p).log" 2>&1) &
done
timeout 120 $b make-model --shape llama3-8b --out $m >"$out/make-model.txt" 2>&1
sed -i 's/"max_position_embeddings": 8192/"max_position_embeddings": 40960/' $m/config.json
wait
log tests
runt() { # tag binary dir regex
  (cd $3 && timeout ${TT:-150} /tmp/t/$2.test -test.count=1 -test.v -test.run "$4" >"$out/test-$1.log" 2>&1); local rc=$?
  echo "test $1 rc=$rc: $(grep -cE '^\s*--- PASS' "$out/test-$1.log") passed, $(grep -cE '^\s*--- FAIL' "$out/test-$1.log") failed, last: $(grep -E '^=== RUN' "$out/test-$1.log" | tail -1)" >>"$out/tests.txt"
}
runt ops cudabackend kernels/cudabackend 'TestPrefillWGModule|TestProjectRoPEStoreKVGPU|TestPrefetchL2GPU|TestMatMulAddNormGPU|TestTunedGEMM$|TestMergedAllTokensGPU|TestNormRowsGPU|TestAddBF16RMSNormGPU' &
runt wg cudabackend kernels/cudabackend '(TestPrefillAttentionKernels|TestVarlenPrefillKernels)/.*/^wg$' &
runt models all models/all 'TestFusedRoPEDecodeGPU|TestNormTailDecodeGPU|TestL2PrefetchDecodeGPU' &
wait
TT=100 runt dect cudabackend kernels/cudabackend '(TestDecodeMMA|TestDecodePipePositions|TestDecodePipeCapturedStep)/pipe_s3w4h1t($|_chunk)'
cat "$out/tests.txt"; grep -h -B2 -A8 -E '^\s*--- FAIL' "$out"/test-*.log | grep -v -- '--- PASS' | head -40
one() { # tag env... -- bench args
  left || { echo "$1: skipped (time)" | tee -a "$out/summary.txt"; return; }
  local tag=$1; shift; local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  local f="$out/$tag.txt"
  env "${envs[@]}" timeout 60 $b bench --device cuda:0 --budgets resident "$@" >"$f" 2>&1
  local r g k
  r=$(grep -E '^resident' "$f" | awk '{printf "row: %s ", $0}' | tr -s ' ')
  g=$(grep replayed "$f" | sed 's/.*device: /graph /')
  k=$(grep -E '^attn_' "$f" | awk '{printf "%s %s ms; ", $1, $3}')
  echo "$tag: $r $g $k" | tee -a "$out/summary.txt"
}
log benches
D="--model $m --mode decode --context 512 --iters 20"
one d512 NOOP=1 -- $D
one d512-norope FT_FUSE_ROPE=0 -- $D
one d512-tail FT_NORM_TAIL=1 -- $D
one d512-l2o FT_L2_PREFETCH=o -- $D
one d512-l2all FT_L2_PREFETCH=all -- $D
one d512-tail-l2o FT_NORM_TAIL=1 FT_L2_PREFETCH=o -- $D
P8="--model $m --mode prefill --tokens 8192 --iters 2 --warmup 1"
PK="--model $m --batch 64 --mode prefill --tokens 512 --iters 2 --warmup 1"
one pre8k NOOP=1 -- $P8
one pre8k-wg FT_TRACE=1 FT_PREFILL_VARIANT=wg -- $P8
one packed NOOP=1 -- $PK
one packed-wg FT_PREFILL_VARIANT=wg -- $PK
for v in s3w4h1t s2w4h1t s4w2h1t; do
  one d32k-$v FT_DECODE_VARIANT=$v -- --model $m --mode decode --context 32000 --iters 5 --warmup 1 --kernel-profile
done
one d32k-t-tail-l2o FT_DECODE_VARIANT=s3w4h1t FT_NORM_TAIL=1 FT_L2_PREFETCH=o -- --model $m --mode decode --context 32000 --iters 10 --warmup 2
one d8k-t FT_DECODE_VARIANT=s3w4h1t -- --model $m --mode decode --context 8192 --iters 10 --warmup 2
one d8k-t-tail-l2o FT_DECODE_VARIANT=s3w4h1t FT_NORM_TAIL=1 FT_L2_PREFETCH=o -- --model $m --mode decode --context 8192 --iters 10 --warmup 2
one pre8k-norows0 FT_NORM_ROWS=0 -- $P8
one pre8k-gateup FT_MERGED_GEMM=gateup -- $P8
one pre8k-mergedall FT_MERGED_GEMM=all -- $P8
one pre8k-resacc FT_PREFILL_RESACC=1 -- $P8
one packed-gateup FT_MERGED_GEMM=gateup -- $PK
one packed-resacc FT_PREFILL_RESACC=1 -- $PK
one pre8k-wg-prof FT_PREFILL_VARIANT=wg -- $P8 --kernel-profile
log done
cd "$out" && tar czf all.tgz *.txt *.log 2>/dev/null; true
