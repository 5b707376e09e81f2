#!/usr/bin/env bash
# Session 16, call b (about 9 minutes): GPU tests of the new defaults
# (s3w4h1tp attention over contiguous caches; qknorm_rope_store reading the
# position before the wait and v with the head) and the graph-vs-eager
# checks, then run-model figures: Llama-3-8B after 12 ids (new default
# against s3w4h1t and s2w4h1tp) and after 8,192 ids, Qwen3-8B (the new
# qknorm kernel against FT_QKNORM_EARLY=0, FT_GEMV=pipe, s3w4h1t).
# Usage (repo root, GPU machine): bash bench/h200-s16b.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=545
compile_tests kernels/cudabackend models/decoder models/all
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
q3=/tmp/qwen3-8b
(MT=240 make_models) &
(timeout 240 $b make-model --shape qwen3-8b --out $q3 >"$out/make-model-q3.txt" 2>&1) &
wait
log tests
TT=150 runt kern cudabackend kernels/cudabackend 'TestNormRoPEStoreKVGPU|TestGEMVPipeBitIdentical|TestDecodePipePositions|TestDecodePipeCapturedStep|TestCapturedStep' &
TT=120 runt dec decoder models/decoder 'TestAsyncDecodeGPU|TestGenerateFed' &
TT=150 runt all all models/all 'GPU$|TestFusedDecodeSwitchesGPU' &
wait
cat "$out/tests.txt" | tee -a "$out/summary.txt"
grep -h -B2 -A12 -- '--- FAIL' "$out"/test-*.log | head -40
log figures
R="-- --max-new-tokens 256"
rmodel d1 NOOP=1 $R
rmodel t1 FT_DECODE_VARIANT=s3w4h1t $R
rmodel d2 NOOP=1 $R
rmodel s2 FT_DECODE_VARIANT=s2w4h1tp $R
rmodel d3 NOOP=1 $R
rmodel t2 FT_DECODE_VARIANT=s3w4h1t $R
m=$q3 rmodel q3-d1 NOOP=1 $R
m=$q3 rmodel q3-late1 FT_QKNORM_EARLY=0 $R
m=$q3 rmodel q3-d2 NOOP=1 $R
m=$q3 rmodel q3-late2 FT_QKNORM_EARLY=0 $R
m=$q3 rmodel q3-pipe FT_GEMV=pipe $R
m=$q3 rmodel q3-d3 NOOP=1 $R
m=$q3 rmodel q3-t FT_DECODE_VARIANT=s3w4h1t $R
long=$(seq -s, 100 8291)
for v in d t; do
  left || break
  e=NOOP=1; [ $v = t ] && e=FT_DECODE_VARIANT=s3w4h1t
  env $e timeout 60 $b run-model --model $m --device cuda:0 --token-ids $long --ignore-eos --max-new-tokens 256 >"$out/rm-8k-$v.txt" 2>&1
  tail -1 "$out/rm-8k-$v.txt" | sed "s/^/run-model 8k $v: /" | tee -a "$out/summary.txt"
done
finish
