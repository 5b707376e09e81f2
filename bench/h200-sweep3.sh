#!/usr/bin/env bash
# One GPU call that picks the defaults among the run-time kernel variants
# of the third 2026-12-01 session (issues 15, 21, 20): the GPU tests of the
# swept variants, then decode attention variants (FT_DECODE_VARIANT) at
# context 32,000 and the batch-64 step's splits, prefill attention variants
# (FT_PREFILL_VARIANT) at 8,192 and 64 × 512, the batched k/v pair GEMM's
# batch figures, run-model, and the host pool's spin (FT_HOST_SPIN) at
# budget 0. One line a run in OUTDIR/summary.txt.
# Usage (repo root, GPU machine): bench/h200-sweep3.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
log() { echo "== $(date +%T) $*" | tee -a "$out/steps.log"; }
b=bin/infer-cuda; m=/tmp/llama3-8b; ids=37,235,396,72,255,393,203,133,335,448,144,129
log build; timeout 150 make build-cuda >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
log tests
modes='_(pipe|pipe_splits_1|pipe_s3w4h1o|pipe_s4w4h1r|pipe_s3w4h4r|pipe_s3w8h8r|mma)$'
GOFLAGS="-run=TestDecodeMMA/$modes|TestPagedDecodeMMA/$modes|TestDecodePipePositions|TestPrefillAttentionKernels|TestVarlenPrefillKernels|TestPrefillVariantOccupancy|TestMatMulPair" \
  timeout 240 make -s test-cuda CUDA_PKGS='./kernels/cudabackend' >"$out/tests.log" 2>&1
echo "kernel tests rc=$?" | tee -a "$out/steps.log"; grep -E '^(--- FAIL|FAIL|ok|panic)' "$out/tests.log" | head; grep -A10 -- '--- FAIL' "$out/tests.log" | head -40
GOFLAGS='-run=TestBatchEveryDevice' timeout 90 make -s test-cuda CUDA_PKGS='./models/all' >"$out/tests-batch.log" 2>&1
echo "batch tests rc=$?" | tee -a "$out/steps.log"; grep -E '^(--- FAIL|FAIL|ok|panic)' "$out/tests-batch.log" | head -5
log make-model; [ -d $m ] || timeout 120 $b make-model --shape llama3-8b --out $m >"$out/make-model.txt" 2>&1
sed -i 's/"max_position_embeddings": 8192/"max_position_embeddings": 40960/' $m/config.json
one() { # tag env... -- bench args
  local tag=$1; shift; local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  local f="$out/$tag.txt"
  env "${envs[@]}" timeout 60 $b bench --model $m --device cuda:0 --budgets resident "$@" >"$f" 2>&1
  echo "$tag: $(grep -E '^(attn_|cublasGemmStrided)' "$f" | awk '{printf "%s %s ms; ", $1, $3}') $(grep '^resident' "$f" | awk '{print "meas", (NF>8 ? $10 : $3), (NF>8 ? "" : $5" tok/s")}') $(grep replayed "$f" | sed 's/.*device: /graph /')" | tee -a "$out/summary.txt"
}
log decode variants
for v in s3w4h1r s3w4h1o s4w4h1r s3w4h4r s3w8h8r; do
  one "dec32k-$v" FT_DECODE_VARIANT=$v -- --mode decode --context 32000 --iters 10 --warmup 2 --kernel-profile
done
one dec32k-old FT_DECODE_PIPE=0 -- --mode decode --context 32000 --iters 10 --warmup 2 --kernel-profile
one dec8k NOOP=1 -- --mode decode --context 8192 --iters 10 --warmup 2 --kernel-profile
one dec512 NOOP=1 -- --mode decode --context 512 --iters 20 --warmup 2 --kernel-profile
log batch
one b64-split1 NOOP=1 -- --batch 64 --context 512 --iters 5 --warmup 2 --kernel-profile
one b64-split2 FT_DECODE_SPLITS=2 -- --batch 64 --context 512 --iters 5 --warmup 2 --kernel-profile
one b64-old FT_DECODE_PIPE=0 -- --batch 64 --context 512 --iters 5 --warmup 2 --kernel-profile
one b64-s3w4h4r FT_DECODE_VARIANT=s3w4h4r -- --batch 64 --context 512 --iters 5 --warmup 2 --kernel-profile
one b256 NOOP=1 -- --batch 256 --context 512 --iters 5 --warmup 2
one b256-old FT_DECODE_PIPE=0 -- --batch 256 --context 512 --iters 5 --warmup 2
log prefill variants
for v in base w4m32; do one "pre8k-$v" FT_PREFILL_VARIANT=$v -- --mode prefill --tokens 8192 --iters 2 --warmup 1 --kernel-profile; done
for v in base m64 w4m32; do one "packed-$v" FT_PREFILL_VARIANT=$v -- --batch 64 --mode prefill --tokens 512 --iters 2 --warmup 1 --kernel-profile; done
log run-model; for i in 1; do timeout 60 $b run-model --model $m --device cuda:0 --token-ids $ids --max-new-tokens 256 --ignore-eos 2>&1 | tail -1; done | tee -a "$out/summary.txt"
log hybrid spin
for s in 0; do FT_HOST_SPIN=$s timeout 100 $b bench --model $m --device cuda:0 --budgets 0 --mode decode --context 512 --iters 5 --warmup 6 --host-threads 16 >"$out/hybrid-spin$s.txt" 2>&1; echo "hybrid spin=${s:-default}: $(grep '^0+host' "$out/hybrid-spin$s.txt")" | tee -a "$out/summary.txt"; done
log done
