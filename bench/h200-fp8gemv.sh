#!/usr/bin/env bash
# Issue 18, resident FP8 decode at the HBM floor: the GPU tests of the
# fp8gemv.cu kernels (W8A16 GEMVs, fused q/k/v and gate·up·SiLU, the
# vectorized dequantization) and the FP8 checkpoints, the kernels'
# bandwidth report, then per-kernel tables of a resident decode step at
# context 512 and a prefill of 2,048 tokens for both FP8 layouts, new
# kernels against FT_FP8_GEMV=legacy.
# Usage (repo root, GPU machine): bench/h200-fp8gemv.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
log() { echo "== $(date +%T) $*" | tee -a "$out/steps.log"; }
b=bin/infer-cuda
log build; timeout 150 make build-cuda >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
git rev-parse --short HEAD >"$out/commit.txt" 2>/dev/null
log tests
GOFLAGS='-run=TestFP8GEMVv|TestMatMulNFP8|TestGateUpSiLUFP8|TestDequantFP8|TestFP8Legacy|TestMatMulFP8|TestFP8GEMVBandwidth -v' \
  make -s test-cuda CUDA_PKGS=./kernels/cudabackend >"$out/test-kernels.log" 2>&1; echo "kernel tests rc=$?" | tee -a "$out/steps.log"
GOFLAGS='-run=TestFP8Checkpoints|TestFP8FusedDecode' make -s test-cuda CUDA_PKGS=./models/all >"$out/test-fp8-models.log" 2>&1
echo "FP8 checkpoint tests rc=$?" | tee -a "$out/steps.log"
grep -E '^(--- FAIL|FAIL|ok|panic)|GB/s of FP8' "$out"/test-*.log | head -60
for dt in fp8-channel fp8-block; do
  m=/tmp/llama3-8b-$dt
  log make-model $dt; [ -d $m ] || timeout 150 $b make-model --shape llama3-8b --dtype $dt --out $m >"$out/make-$dt.txt" 2>&1
  for cfg in new legacy; do
    e=(); [ $cfg = legacy ] && e=(FT_FP8_GEMV=legacy)
    log "decode $dt $cfg"
    env "${e[@]}" timeout 90 $b bench --model $m --device cuda:0 --budgets resident --mode decode --context 512 --iters 20 --kernel-profile \
      >"$out/decode-$dt-$cfg.txt" 2>&1; head -24 "$out/decode-$dt-$cfg.txt"
    log "prefill $dt $cfg"
    env "${e[@]}" timeout 90 $b bench --model $m --device cuda:0 --budgets resident --mode prefill --tokens 2048 --iters 3 --warmup 1 --kernel-profile \
      >"$out/prefill-$dt-$cfg.txt" 2>&1; head -16 "$out/prefill-$dt-$cfg.txt"
  done
done
