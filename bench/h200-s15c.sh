#!/usr/bin/env bash
# Session 15, call c (about 7 minutes): GPU tests of the session's kernel
# changes (early-issue GEMVs, 256 positions a decode split, the q/k norm
# kernel's early loads), then issue 21's figures with the new defaults
# against the old ones (FT_GEMV_EARLY=0 FT_DECODE_CHUNK=128) on the same
# machine: run-model on the Llama-3-8B shape after 12 ids and after 8,192,
# Qwen3-8B, the scheduler's solo mode, the graph step at 512 and 8,192.
# Usage (repo root, GPU machine): bash bench/h200-s15c.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=540
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
compile_tests kernels/cudabackend models/all models/decoder models/generate
q3=/tmp/qwen3-8b
(MT=240 make_models) &
(timeout 240 $b make-model --shape qwen3-8b --out $q3 >"$out/make-model-q3.txt" 2>&1
 sed -i 's/"max_position_embeddings": [0-9]*/"max_position_embeddings": 40960/' $q3/config.json) &
wait
log tests
TT=200 runt kern cudabackend kernels/cudabackend 'TestGEMVPipeBitIdentical|TestNormRoPEStoreKVGPU|TestDecodeMMA|TestDecodePipePositions|TestDecodePipeCapturedStep|TestCapturedStep|TestArgmaxFeed' &
TT=200 runt all all models/all 'GPU$|TestFamiliesEveryDevice|TestBatchEveryDevice|TestOffloadedEqualsResident|TestFusedDecodeSwitchesGPU' &
TT=120 runt dec decoder models/decoder 'TestAsyncDecodeGPU|TestGenerateFed' &
TT=120 runt gen generate models/generate 'TestSchedulerSoloGraphCUDA|TestSchedulerSwapBatchCUDA' &
wait
cat "$out/tests.txt"
log figures
R="-- --max-new-tokens 256"
OLD="FT_GEMV_EARLY=0 FT_DECODE_CHUNK=128"
rmodel n1 NOOP=1 $R
rmodel o1 $OLD $R
rmodel n2 NOOP=1 $R
rmodel c512 FT_DECODE_CHUNK=512 $R
rmodel n3 NOOP=1 $R
rmodel o2 $OLD $R
long=$(seq -s, 100 8291)
for v in new old; do
  e=NOOP=1; [ $v = old ] && e=$OLD
  env $e timeout 90 $b run-model --model $m --device cuda:0 --token-ids $long --ignore-eos --max-new-tokens 256 >"$out/rm-8k-$v.txt" 2>&1
  tail -1 "$out/rm-8k-$v.txt" | sed "s/^/run-model 8k $v: /" | tee -a "$out/summary.txt"
done
env timeout 90 $b run-model --model $m --device cuda:0 --batch-file bench/s14-one.jsonl --out "$out/sched.jsonl" >"$out/sched.txt" 2>&1
echo "sched solo: $(tail -1 "$out/sched.txt")" | tee -a "$out/summary.txt"
D="--model $m --budgets resident --mode decode --iters 20"
one g512 NOOP=1 -- $D --context 512
one g8k NOOP=1 -- $D --context 8192
m=$q3 rmodel q3-n1 NOOP=1 $R
m=$q3 rmodel q3-o1 $OLD $R
m=$q3 rmodel q3-n2 NOOP=1 $R
m=$q3 rmodel q3-unfused FT_QKNORM_ROPE=0 $R
m=$q3 rmodel q3-n3 NOOP=1 $R
cat "$out/tests.txt" >>"$out/summary.txt"
finish
