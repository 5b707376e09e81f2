#!/usr/bin/env bash
# Session 17, call c (about 8 minutes): the open issues' figures with the
# committed defaults after s17a/s17b's removals, in one call: the decode
# tests the removals touch first, then run-model on Llama-3-8B (three runs,
# and one after 8,192 ids) and Qwen3-8B (two runs), the resident FP8 step,
# prefill 8,192 (two runs) and 64 x 512 packed, and budget 0 + host (two
# runs, last, skipped when time is short).
# Usage (repo root, GPU machine): bash bench/h200-s17c.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=540
compile_tests kernels/cudabackend models/all
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
q3=/tmp/qwen3-8b f8=/tmp/llama3-8b-fp8
(timeout 240 $b make-model --shape qwen3-8b --out $q3 >"$out/make-model-q3.txt" 2>&1) &
(timeout 240 $b make-model --shape llama3-8b --dtype fp8-channel --out $f8 >"$out/make-model-fp8.txt" 2>&1) &
(MT=240 make_models) &
wait
log tests
TT=150 runt kern cudabackend kernels/cudabackend 'TestNormRoPEStoreKVGPU|TestProjectRoPEStoreKVGPU|TestGEMVPipeBitIdentical|TestFP8GEMVv|TestMatMulNFP8|TestGateUpSiLUFP8|TestCapturedStep' &
TT=150 runt all all models/all 'GPU$|TestFusedDecodeSwitchesGPU' &
wait
cat "$out/tests.txt" | tee -a "$out/summary.txt"
grep -h -B2 -A12 -- '--- FAIL' "$out"/test-*.log | head -40
log figures
R="-- --max-new-tokens 256"
rmodel d1 NOOP=1 $R
m=$q3 rmodel q3-1 NOOP=1 $R
rmodel d2 NOOP=1 $R
m=$q3 rmodel q3-2 NOOP=1 $R
rmodel d3 NOOP=1 $R
long=$(seq -s, 100 8291)
timeout 60 $b run-model --model $m --device cuda:0 --token-ids $long --ignore-eos --max-new-tokens 256 >"$out/rm-8k.txt" 2>&1
tail -1 "$out/rm-8k.txt" | sed "s/^/run-model 8k: /" | tee -a "$out/summary.txt"
one fp8-512 NOOP=1 -- --model $f8 --budgets resident --mode decode --iters 20 --context 512
P="--model $m --budgets resident --mode prefill --iters 3 --warmup 1"
one pf8k-1 NOOP=1 -- $P --tokens 8192
one packed NOOP=1 -- $P --batch 64 --tokens 512
one pf8k-2 NOOP=1 -- $P --tokens 8192
HB=0 HI=8 LEFT=420 hyb b0-1 NOOP=1
HB=0 HI=8 LEFT=480 hyb b0-2 NOOP=1
finish
