#!/usr/bin/env bash
# Session 15, call d (about 6 minutes): the decode attention with its first
# copies before the dependent-launch wait (FT_DECODE_VARIANT=s3w4h1tp,
# s2w4h1tp) against the default s3w4h1t on run-model (Llama-3-8B after 12
# and 8,192 ids, Qwen3-8B), and the GPU tests of the session's last changes
# (the decode variants, TestGEMVPipeBitIdentical corrected, the fed loop and
# the scheduler after the review's mends).
# Usage (repo root, GPU machine): bash bench/h200-s15d.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=400
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
compile_tests kernels/cudabackend models/decoder models/generate
q3=/tmp/qwen3-8b
(MT=240 make_models) &
(timeout 240 $b make-model --shape qwen3-8b --out $q3 >"$out/make-model-q3.txt" 2>&1
 sed -i 's/"max_position_embeddings": [0-9]*/"max_position_embeddings": 40960/' $q3/config.json) &
wait
log tests
TT=150 runt kern cudabackend kernels/cudabackend 'TestGEMVPipeBitIdentical|TestDecodeMMA|TestDecodePipePositions|TestDecodePipeCapturedStep|TestCapturedStep' &
TT=100 runt dec decoder models/decoder 'TestAsyncDecodeGPU|TestGenerateFed' &
TT=100 runt gen generate models/generate 'TestSchedulerSoloGraphCUDA|TestSchedulerSwapBatchCUDA' &
wait
cat "$out/tests.txt"
log figures
R="-- --max-new-tokens 256"
rmodel d1 NOOP=1 $R
rmodel p1 FT_DECODE_VARIANT=s3w4h1tp $R
rmodel d2 NOOP=1 $R
rmodel p2 FT_DECODE_VARIANT=s3w4h1tp $R
rmodel p2s FT_DECODE_VARIANT=s2w4h1tp $R
rmodel d3 NOOP=1 $R
rmodel p3 FT_DECODE_VARIANT=s3w4h1tp $R
long=$(seq -s, 100 8291)
for v in d p; do
  left || break
  e=NOOP=1; [ $v = p ] && e=FT_DECODE_VARIANT=s3w4h1tp
  env $e timeout 60 $b run-model --model $m --device cuda:0 --token-ids $long --ignore-eos --max-new-tokens 256 >"$out/rm-8k-$v.txt" 2>&1
  tail -1 "$out/rm-8k-$v.txt" | sed "s/^/run-model 8k $v: /" | tee -a "$out/summary.txt"
done
m=$q3 rmodel q3-d1 NOOP=1 $R
m=$q3 rmodel q3-p1 FT_DECODE_VARIANT=s3w4h1tp $R
m=$q3 rmodel q3-d2 NOOP=1 $R
m=$q3 rmodel q3-p2 FT_DECODE_VARIANT=s3w4h1tp $R
cat "$out/tests.txt" >>"$out/summary.txt"
finish
