#!/usr/bin/env bash
# Prefill attention: w4m32 (the default) against fa2 (prefill_fa2.cu) on the
# H200. Builds, runs the prefill GPU tests (every variant against the CPU
# reference, blocks per SM), then for each variant a resident prefill of
# 8,192 tokens and 64 × 512 packed sequences of the Llama-3-8B shape with
# the kernel profile; one summary line a run: the attention kernel's ms over
# 32 layers and the forward's ms. About 3 minutes of GPU time.
# Usage (repo root, GPU machine): bench/h200-prefill4.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?usage: bench/h200-prefill4.sh OUTDIR}; mkdir -p "$out"
log() { echo "== $(date +%T) $*" | tee -a "$out/steps.log"; }
b=bin/infer-cuda; m=/tmp/llama3-8b
log build; timeout 150 make build-cuda >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
log tests
GOFLAGS='-v -run=TestPrefillAttentionKernels|TestVarlenPrefillKernels|TestPrefillVariantOccupancy|TestVarlenTiles|TestChoosePrefillVariant|TestPrefillVariantSmem' \
  timeout 240 make -s test-cuda CUDA_PKGS='./kernels/cudabackend' >"$out/tests.log" 2>&1
echo "tests rc=$?" | tee -a "$out/steps.log"
grep -E 'blocks of .* per SM' "$out/tests.log" | sed 's/^ *//' | tee -a "$out/steps.log"
grep -E '^(--- FAIL|FAIL|ok|panic)|^    --- FAIL' "$out/tests.log" | head -30; grep -A8 -- '--- FAIL' "$out/tests.log" | head -60
log make-model; [ -d $m ] || timeout 120 $b make-model --shape llama3-8b --out $m >"$out/make-model.txt" 2>&1
# attn: the attention kernel's line of the profile (name, calls, ms);
# fwd: the forward's measured ms (column "meas ms" of the prefill table,
# "step ms" of the packed one).
row() { # variant case file fwd-column
  local a f
  a=$(grep -E '^attn_' "$3" | awk '{printf "%s %s ms  ", $1, $3}')
  f=$(awk -v c="$4" '$1 == "resident" {print $c}' "$3")
  printf '%-6s %-10s attn %-46s forward %s ms\n' "$1" "$2" "${a:-?}" "${f:-?}" | tee -a "$out/summary.txt"
}
for v in w4m32 fa2; do
  log "variant $v"
  FT_PREFILL_VARIANT=$v timeout 60 $b bench --model $m --device cuda:0 --budgets resident --mode prefill --tokens 8192 \
    --iters 2 --warmup 1 --kernel-profile >"$out/prefill-8k-$v.txt" 2>&1 || echo "prefill-8k $v rc=$?"
  row $v prefill-8k "$out/prefill-8k-$v.txt" 10
  FT_PREFILL_VARIANT=$v timeout 60 $b bench --model $m --device cuda:0 --budgets resident --batch 64 --mode prefill --tokens 512 \
    --iters 2 --warmup 1 --kernel-profile >"$out/packed-$v.txt" 2>&1 || echo "packed $v rc=$?"
  row $v packed-64x512 "$out/packed-$v.txt" 3
done
log done
