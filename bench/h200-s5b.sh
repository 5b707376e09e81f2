#!/usr/bin/env bash
# The fifth 2026-12-01 session's second GPU call (about 7 minutes): Nsight
# Compute on the decode attention at 8,192 and 32,000 and on the fa2 prefill
# attention; the decode steps at 8,192 and 32,000 with the defaults; fewer
# positions per decode split at 512 (FT_DECODE_CHUNK=64); then the GPU tests
# the fourth session could not finish (tuned GEMM filter, merged GEMMs,
# fused FP8 MLP, decode pipeline positions and captured steps).
# Usage (repo root, GPU machine): bash bench/h200-s5b.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"; t0=$(date +%s)
log() { echo "== $(date +%T) +$(( $(date +%s) - t0 ))s $*" | tee -a "$out/steps.log"; }
left() { [ $(( $(date +%s) - t0 )) -lt ${1:-300} ]; }
b=bin/infer-cuda; m=/tmp/llama3-8b
log build; timeout 170 make build-cuda >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
mkdir -p /tmp/t; R=$PWD; C=/usr/local/cuda
export CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -I$R/runtime/cuda/compat -I$C/include" \
  CGO_LDFLAGS="-L$C/lib64 -L$C/lib64/stubs -Wl,--disable-new-dtags,-rpath,$C/lib64:/usr/local/nvidia/lib64" \
  LD_LIBRARY_PATH="$C/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}"
log compile-tests+make-model
for p in kernels/cudabackend models/all; do
  (env GOFLAGS=-mod=vendor timeout 170 go test -tags cuda -c -o /tmp/t/$(basename $p).test ./$p >"$out/compile-$(basename $p).log" 2>&1) &
done
timeout 120 $b make-model --shape llama3-8b --out $m >"$out/make-model.txt" 2>&1
sed -i 's/"max_position_embeddings": 8192/"max_position_embeddings": 40960/' $m/config.json
secs="--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats"
nc() { # tag kernel-regex skip count -- bench args
  local tag=$1 k=$2 s=$3 c=$4; shift 5
  timeout 90 ncu --clock-control none -k "regex:$k" --launch-skip $s --launch-count $c $secs --page details \
    $b bench --device cuda:0 --budgets resident "$@" >"$out/ncu-$tag.txt" 2>&1
  echo "ncu $tag rc=$?" >>"$out/summary.txt"
}
log ncu
nc dec32k 'attn_decode_pipe' 40 2 -- --model $m --mode decode --context 32000 --iters 1 --warmup 1
nc dec8k 'attn_decode_pipe' 40 2 -- --model $m --mode decode --context 8192 --iters 1 --warmup 1
nc pre8k 'attn_prefill_fa2' 3 1 -- --model $m --mode prefill --tokens 8192 --iters 1 --warmup 0
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
one dec512 NOOP=1 -- --model $m --mode decode --context 512 --iters 20
one dec512-chunk64 FT_DECODE_CHUNK=64 -- --model $m --mode decode --context 512 --iters 20
one dec8k NOOP=1 -- --model $m --mode decode --context 8192 --iters 10 --warmup 2
one dec32k NOOP=1 -- --model $m --mode decode --context 32000 --iters 10 --warmup 2
one dec32k-prof NOOP=1 -- --model $m --mode decode --context 32000 --iters 5 --warmup 1 --kernel-profile
wait
log tests
runt() { # tag binary dir regex
  (cd $3 && timeout ${TT:-150} /tmp/t/$2.test -test.count=1 -test.v -test.run "$4" >"$out/test-$1.log" 2>&1); local rc=$?
  echo "test $1 rc=$rc: $(grep -cE '^\s*--- PASS' "$out/test-$1.log") passed, $(grep -cE '^\s*--- FAIL' "$out/test-$1.log") failed, last: $(grep -E '^=== RUN' "$out/test-$1.log" | tail -1)" >>"$out/tests.txt"
}
runt ops cudabackend kernels/cudabackend 'TestTunedGEMM|TestMatMulMergedGPU|TestGateUpSiLUMergedGPU|TestMLPFP8|TestFP8SiLUQuantRows|TestMatMulFP8Lt|TestNormProjectorGPU' &
runt decode cudabackend kernels/cudabackend 'TestDecodePipeCapturedStep|TestDecodePipePositions' &
wait
cat "$out/tests.txt"; grep -h -A6 -E '^\s*--- FAIL' "$out"/test-*.log | grep -v -- '--- PASS' | head -30
log done
cd "$out" && tar czf all.tgz *.txt *.log 2>/dev/null; true
