#!/usr/bin/env bash
# The fifth 2026-12-01 session's closing GPU call (about 9 minutes): GPU
# tests of the new defaults (wg prefill attention, the transposed decode
# attention for one sequence), then issue 15's figures with the committed
# defaults (resident batches, everything streamed and 8 GiB batches, decode
# at 512 / 8,192 / 32,000, prefill 8,192 and 64 × 512 packed, run-model)
# and the wg2 prefill attention against the default; bench/h200-s5e.sh
# follows with the peers and the FP8 prefill ratio.
# Usage (repo root, GPU machine): bash bench/h200-s5d.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"; t0=$(date +%s)
log() { echo "== $(date +%T) +$(( $(date +%s) - t0 ))s $*" | tee -a "$out/steps.log"; }
left() { [ $(( $(date +%s) - t0 )) -lt ${1:-500} ]; }
b=bin/infer-cuda; m=/tmp/llama3-8b; ids=37,235,396,72,255,393,203,133,335,448,144,129
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
  (cd $3 && timeout ${TT:-120} /tmp/t/$2.test -test.count=1 -test.v -test.run "$4" >"$out/test-$1.log" 2>&1); local rc=$?
  echo "test $1 rc=$rc: $(grep -cE '^\s*--- PASS' "$out/test-$1.log") passed, $(grep -cE '^\s*--- FAIL' "$out/test-$1.log") failed, last: $(grep -E '^=== RUN' "$out/test-$1.log" | tail -1)" >>"$out/tests.txt"
}
runt ops cudabackend kernels/cudabackend 'TestTunedGEMM$|TestPrefillWGModule|(TestPrefillAttentionKernels|TestVarlenPrefillKernels)/.*/^wg2$|TestDecodeMMA/pipe_s3w4h1t($|_chunk)' &
runt models all models/all 'TestFusedDecodeSwitchesGPU|TestBatchEveryDevice|TestMergedGEMMBatchGPU' &
wait
cat "$out/tests.txt"; grep -h -B2 -A8 -E '^\s*--- FAIL' "$out"/test-*.log | grep -v -- '--- PASS' | head -40
one() { # tag env... -- bench args
  left || { echo "$1: skipped (time)" | tee -a "$out/summary.txt"; return; }
  local tag=$1; shift; local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  local f="$out/$tag.txt"
  env "${envs[@]}" timeout 90 $b bench --device cuda:0 "$@" >"$f" 2>&1
  local r g k
  r=$(grep -E '^(resident|0 |8GiB|budget)' "$f" | awk '{printf "row: %s | ", $0}' | tr -s ' ')
  g=$(grep replayed "$f" | sed 's/.*device: /graph /')
  k=$(grep -E '^attn_' "$f" | awk '{printf "%s %s ms; ", $1, $3}')
  echo "$tag: $r $g $k" | tee -a "$out/summary.txt"
}
log benches
R="--budgets resident"
one batch FT_TRACE=1 -- $R --model $m --batch 64,256 --context 512 --iters 5 --warmup 2
one offload-batch NOOP=1 -- --budgets 0,8GiB --model $m --batch 64,256 --context 512 --iters 3 --warmup 3
one d32k NOOP=1 -- $R --model $m --mode decode --context 32000 --iters 10 --warmup 2
one d8k NOOP=1 -- $R --model $m --mode decode --context 8192 --iters 10 --warmup 2
one d512 NOOP=1 -- $R --model $m --mode decode --context 512 --iters 20
one d512-r FT_DECODE_VARIANT=s3w4h1r -- $R --model $m --mode decode --context 512 --iters 20
left && timeout 40 $b run-model --model $m --device cuda:0 --token-ids $ids --max-new-tokens 256 --ignore-eos 2>&1 | tail -1 | sed 's/^/run-model: /' | tee -a "$out/summary.txt"
P8="--model $m --mode prefill --tokens 8192 --iters 2 --warmup 1"
PK="--model $m --batch 64 --mode prefill --tokens 512 --iters 2 --warmup 1"
one pre8k FT_TRACE=1 -- $R $P8
one pre8k-wg2 FT_PREFILL_VARIANT=wg2 -- $R $P8
one packed NOOP=1 -- $R $PK
one packed-wg2 FT_PREFILL_VARIANT=wg2 -- $R $PK
one pre8k-b NOOP=1 -- $R $P8
log done
cd "$out" && tar czf all.tgz *.txt *.log 2>/dev/null; true
