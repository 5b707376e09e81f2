#!/usr/bin/env bash
# The fourth 2026-12-01 session's last GPU call (about 5 minutes): the GPU
# tests of the merged q/k/v and gate/up GEMMs and of the tuned GEMMs'
# candidate filter, the decode tests the closing call ran out of time for,
# whole models over the packed weight allocations, then the batch A/B of the
# merged GEMMs and the resident decode with the committed defaults.
# Usage (repo root, GPU machine): bench/h200-s4c.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"; t0=$(date +%s)
log() { echo "== $(date +%T) +$(( $(date +%s) - t0 ))s $*" | tee -a "$out/steps.log"; }
left() { [ $(( $(date +%s) - t0 )) -lt ${1:-290} ]; }
b=bin/infer-cuda; m=/tmp/llama3-8b; ids=37,235,396,72,255,393,203,133,335,448,144,129
log build; timeout 170 make build-cuda >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
mkdir -p /tmp/t; R=$PWD; C=/usr/local/cuda
export CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -I$R/runtime/cuda/compat -I$C/include" \
  CGO_LDFLAGS="-L$C/lib64 -L$C/lib64/stubs -Wl,--disable-new-dtags,-rpath,$C/lib64:/usr/local/nvidia/lib64" \
  LD_LIBRARY_PATH="$C/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}"
log compile-tests
for p in kernels/cudabackend models/all; do
  timeout 150 go test -tags cuda -c -o /tmp/t/$(basename $p).test ./$p >"$out/compile-$(basename $p).log" 2>&1 &
done; wait
timeout 120 $b make-model --shape llama3-8b --out $m >"$out/make-model.txt" 2>&1 &
log tests
runt() { # tag binary dir regex
  (cd $3 && timeout ${TT:-110} /tmp/t/$2.test -test.count=1 -test.v -test.run "$4" >"$out/test-$1.log" 2>&1); local rc=$?
  echo "test $1 rc=$rc: $(grep -cE '^\s*--- PASS' "$out/test-$1.log") passed, $(grep -cE '^\s*--- FAIL' "$out/test-$1.log") failed, last: $(grep -E '^=== RUN' "$out/test-$1.log" | tail -1)" >>"$out/tests.txt"
}
runt ops cudabackend kernels/cudabackend 'TestTunedGEMM|TestMatMulMergedGPU|TestGateUpSiLUMergedGPU' &
runt decode cudabackend kernels/cudabackend 'TestDecodePipePositions|TestDecodePipeCapturedStep|TestCapturedStep' &
runt models all models/all 'TestMergedGEMMBatchGPU|TestBatchEveryDevice|TestFusedDecodeSwitchesGPU|TestFP8Checkpoints' &
wait
cat "$out/tests.txt"; grep -hE '^\s*--- FAIL' "$out"/test-*.log | head -20; grep -h -A6 -E '^\s*--- FAIL' "$out"/test-*.log | grep -v -- '--- PASS' | head -30
one() { # tag env... -- bench args
  left || { echo "$1: skipped (time)" | tee -a "$out/summary.txt"; return; }
  local tag=$1; shift; local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  local f="$out/$tag.txt"
  env "${envs[@]}" timeout 45 $b bench --device cuda:0 --budgets resident "$@" >"$f" 2>&1
  local r g t
  r=$(grep -E '^resident' "$f" | awk '{printf "row: %s ", $0}' | tr -s ' ')
  g=$(grep replayed "$f" | sed 's/.*device: /graph /')
  t=$(grep -E 'merged:' "$f" | tr '\n' ' ')
  echo "$tag: $r $g $t" | tee -a "$out/summary.txt"
}
log benches
one batch FT_TRACE=1 -- --model $m --batch 64,256 --context 512 --iters 5 --warmup 2
one batch-nomerge FT_MERGED_GEMM=0 -- --model $m --batch 64,256 --context 512 --iters 5 --warmup 2
one b64-prof NOOP=1 -- --model $m --batch 64 --context 512 --iters 5 --warmup 2 --kernel-profile
grep -E '^(cublas|split|silu|attn)' "$out/b64-prof.txt" | head -8
left && timeout 30 $b run-model --model $m --device cuda:0 --token-ids $ids --max-new-tokens 256 --ignore-eos 2>&1 | tail -1 | sed 's/^/run-model: /' | tee -a "$out/summary.txt"
one dec512 NOOP=1 -- --model $m --mode decode --context 512 --iters 20
log done
