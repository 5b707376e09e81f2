#!/usr/bin/env bash
# The third 2026-12-01 session's last GPU call (about 3 minutes): GPU tests
# of the FP8 GEMV variants and the cuBLASLt scaled FP8 GEMM, the FP8 decode
# step (default variant against the earlier shape) and prefill 2,048, then
# the BF16 figures the session's defaults changed (batch 256, decode 512,
# prefill 8,192, 64 × 512 packed, run-model). One line a run.
# Usage (repo root, GPU machine): bench/h200-final3.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
log() { echo "== $(date +%T) $*" | tee -a "$out/steps.log"; }
b=bin/infer-cuda; ids=37,235,396,72,255,393,203,133,335,448,144,129
log build; timeout 150 make build-cuda >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
log tests
GOFLAGS='-run=TestQuantRowsE4M3|TestMatMulFP8Lt|TestFP8RowsQuantizeOnce|TestFP8GEMVv|TestMatMulNFP8|TestGateUpSiLUFP8|TestFP8GEMMPrefill|TestFP8Checkpoints|TestFP8FusedDecode' \
  timeout 150 make -s test-cuda CUDA_PKGS='./kernels/cudabackend ./models/all' >"$out/tests.log" 2>&1
echo "tests rc=$?" | tee -a "$out/steps.log"; grep -E '^(--- FAIL|FAIL|ok|panic)' "$out/tests.log" | head; grep -A6 -- '--- FAIL' "$out/tests.log" | head -30
row() { echo "$1: $(grep -E "$2" "$3" | awk '{printf "%s %s ms; ", $1, $3}') $(grep -E '^resident' "$3" | awk '{print "meas", (NF>8 ? $10 : $3), (NF>8 ? "" : $5" tok/s")}') $(grep replayed "$3" | sed 's/.*device: /graph /')" | tee -a "$out/summary.txt"; }
m=/tmp/llama3-8b-fp8
log make-fp8; timeout 60 $b make-model --shape llama3-8b --dtype fp8-channel --out $m >"$out/make-fp8.txt" 2>&1
for v in u8r1g u8r1s; do FT_FP8_VARIANT=$v timeout 40 $b bench --model $m --device cuda:0 --budgets resident --mode decode --context 512 --iters 20 --kernel-profile >"$out/fp8dec-$v.txt" 2>&1; row "fp8 decode $v" 'fp8' "$out/fp8dec-$v.txt"; done
FT_TRACE=1 timeout 40 $b bench --model $m --device cuda:0 --budgets resident --mode prefill --tokens 2048 --iters 3 --warmup 1 --kernel-profile >"$out/fp8pre.txt" 2>&1; row "fp8 prefill 2048" 'fp8|quant|cublasLt' "$out/fp8pre.txt"; grep -i "rescale\|falls back" "$out/fp8pre.txt" | head -3
rm -rf $m; m=/tmp/llama3-8b
log make-bf16; timeout 60 $b make-model --shape llama3-8b --out $m >"$out/make-model.txt" 2>&1
timeout 40 $b bench --model $m --device cuda:0 --budgets resident --mode prefill --tokens 2048 --iters 3 --warmup 1 >"$out/pre2k.txt" 2>&1; row "bf16 prefill 2048" 'x^' "$out/pre2k.txt"
timeout 40 $b bench --model $m --device cuda:0 --budgets resident --batch 64,256 --context 512 --iters 5 --warmup 2 >"$out/batch.txt" 2>&1; grep '^resident' "$out/batch.txt" | tee -a "$out/summary.txt"
timeout 40 $b bench --model $m --device cuda:0 --budgets resident --mode decode --context 512 --iters 20 >"$out/dec512.txt" 2>&1; row "decode 512" 'x^' "$out/dec512.txt"
timeout 60 $b bench --model $m --device cuda:0 --budgets resident --mode prefill --tokens 8192 --iters 2 --warmup 1 >"$out/pre8k.txt" 2>&1; row "prefill 8192" 'x^' "$out/pre8k.txt"
timeout 60 $b bench --model $m --device cuda:0 --budgets resident --batch 64 --mode prefill --tokens 512 --iters 2 --warmup 1 >"$out/packed.txt" 2>&1; row "packed 64x512" 'x^' "$out/packed.txt"
timeout 30 $b run-model --model $m --device cuda:0 --token-ids $ids --max-new-tokens 256 --ignore-eos 2>&1 | tail -1 | tee -a "$out/summary.txt"
log done
