#!/usr/bin/env bash
# The prefill attention kernels on the H200: GPU tests against the CPU
# reference, the kernel benchmark, then resident prefill 8,192 and 64 × 512
# packed, new kernels against FT_FLASH=legacy (issue 15).
# Usage (repo root, GPU machine): bench/h200-flash.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
log() { echo "== $(date +%T) $*" | tee -a "$out/steps.log"; }
b=bin/infer-cuda; m=/tmp/llama3-8b
log build; timeout 150 make build-cuda >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
log tests
GOFLAGS='-run=TestPrefillAttentionKernels|TestVarlenPrefillKernels|TestRoPEStoreV8MatchesLegacy|TestVarlenTiles|TestAttention|TestPagedAttention|TestRoPEStoreKV' timeout 200 make -s test-cuda CUDA_PKGS='./kernels/cudabackend' >"$out/tests.log" 2>&1
echo "tests rc=$?" | tee -a "$out/steps.log"; grep -E '^(--- FAIL|FAIL|ok|panic)' "$out/tests.log" | head -20; grep -B2 -A8 -- '--- FAIL' "$out/tests.log" | head -60
log kbench; timeout 120 make -s test-cuda CUDA_PKGS='./kernels/cudabackend' GOFLAGS='-run=^$ -bench=PrefillAttention' 2>&1 | grep -E 'Benchmark|ok|FAIL' | tee "$out/kbench.txt"
log make-model; [ -d $m ] || timeout 120 $b make-model --shape llama3-8b --out $m >"$out/make-model.txt" 2>&1
for v in "" legacy; do
  log "prefill-8k FT_FLASH=$v"; FT_FLASH=$v timeout 90 $b bench --model $m --device cuda:0 --budgets resident --mode prefill --tokens 8192 --iters 3 --warmup 1 --kernel-profile >"$out/prefill-8k-$v.txt" 2>&1; grep -E 'attn_|rope_|^resident' "$out/prefill-8k-$v.txt"
  log "packed FT_FLASH=$v"; FT_FLASH=$v timeout 90 $b bench --model $m --device cuda:0 --budgets resident --batch 64 --mode prefill --tokens 512 --iters 2 --warmup 1 --kernel-profile >"$out/packed-$v.txt" 2>&1; grep -E 'attn_|rope_|^resident' "$out/packed-$v.txt"
done
log done
