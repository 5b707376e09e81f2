#!/usr/bin/env bash
# A/B of the decode-kernel switches (issues 15 and 21) on the Llama-3-8B
# shape: the cuda-tagged tests of the new kernels, then per-kernel tables
# (bench --kernel-profile) of a resident decode step at context 512 and
# 8,000 with each switch off and on, of batched steps at 64 and 256
# sequences, and run-model's 256-token greedy generation.
# Switches (environment, read when the backend is made):
#   FT_DECODE_ATTN=legacy  staged decode attention + separate combine launch
#                          (default: tensor-core decode_mma.cu kernels)
#   FT_FUSE_ADDNORM=0      residual add and post-attention RMSNorm as two
#                          launches (default: add_rmsnorm_f32_bf16)
# Usage (repo root, GPU machine): bench/h200-kernels.sh OUTDIR [full-tests]
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
log() { echo "== $(date +%T) $*" | tee -a "$out/steps.log"; }
b=bin/infer-cuda; m=/tmp/llama3-8b; ids=37,235,396,72,255,393,203,133,335,448,144,129
log build; make build-cuda >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
git rev-parse --short HEAD >"$out/commit.txt" 2>/dev/null
log tests
if [ "${2:-}" = full-tests ]; then
  make -s test-cuda >"$out/test-cuda.log" 2>&1; echo "test-cuda rc=$?" | tee -a "$out/steps.log"
else
  # GOFLAGS reaches go test (go vet ignores -run); CUDA_PKGS narrows make test-cuda.
  GOFLAGS='-run=TestDecodeMMA|TestPagedDecodeMMA|TestAddRMSNormGPU|TestAttention|TestPagedAttention|TestCapturedStep|TestRMSNorm' \
    make -s test-cuda CUDA_PKGS=./kernels/cudabackend >"$out/test-cuda.log" 2>&1
  echo "kernel tests rc=$?" | tee -a "$out/steps.log"
  make -s test-cuda CUDA_PKGS='./models/decoder/... ./models/generate/...' >>"$out/test-cuda.log" 2>&1
  echo "decoder/generate GPU tests rc=$?" | tee -a "$out/steps.log"
fi
grep -E '^(--- FAIL|FAIL|ok|panic)' "$out/test-cuda.log" | head -40
log make-model; [ -d $m ] || $b make-model --shape llama3-8b --out $m >"$out/make-model.txt" 2>&1
# name and environment of each configuration
cfgs=("new" "legacy-attn FT_DECODE_ATTN=legacy" "unfused-addnorm FT_FUSE_ADDNORM=0")
for c in "${cfgs[@]}"; do
  set -- $c; name=$1; shift
  for ctx in 512 8000; do
    log "decode $name ctx $ctx"
    env "$@" $b bench --model $m --device cuda:0 --budgets resident --mode decode --context $ctx --iters 20 --kernel-profile \
      >"$out/decode-$name-$ctx.txt" 2>&1
    grep -E 'resident|replayed|kernel profile|attn|rmsnorm|add_' "$out/decode-$name-$ctx.txt" | head -14
  done
done
for c in "new" "legacy-attn FT_DECODE_ATTN=legacy"; do
  set -- $c; name=$1; shift
  log "batch $name"
  env "$@" $b bench --model $m --device cuda:0 --budgets resident --batch 64,256 --context 512 --iters 5 --warmup 2 --kernel-profile \
    >"$out/batch-$name.txt" 2>&1
  grep -E 'resident|kernel profile|attn|store_rows|embedding' "$out/batch-$name.txt" | head -16
done
for c in "new" "legacy-attn FT_DECODE_ATTN=legacy" "unfused-addnorm FT_FUSE_ADDNORM=0"; do
  set -- $c; name=$1; shift
  log "run-model-256 $name"
  for i in 1 2; do env "$@" $b run-model --model $m --device cuda:0 --token-ids $ids --max-new-tokens 256 --ignore-eos 2>&1 | tail -1; done \
    | tee "$out/run-model-256-$name.txt"
done
log done
