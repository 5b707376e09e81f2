#!/usr/bin/env bash
# The decode attention kernels on the H200 (issues 15 and 21): GPU tests
# against the CPU reference, then resident decode at contexts 32,000, 8,192
# and 512 and the batch-64 step, pipelined kernels against FT_DECODE_PIPE=0.
# Usage (repo root, GPU machine): bench/h200-decattn.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
log() { echo "== $(date +%T) $*" | tee -a "$out/steps.log"; }
b=bin/infer-cuda; m=/tmp/llama3-8b
log build; timeout 150 make build-cuda >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
log tests
GOFLAGS='-run=TestDecodeMMA|TestDecodePipePositions|TestPagedDecodeMMA|TestAttention|TestPagedAttention|TestBatchEveryDevice|TestGraph' timeout 240 make -s test-cuda CUDA_PKGS='./kernels/cudabackend ./models/all ./models/decoder' >"$out/tests.log" 2>&1
echo "tests rc=$?" | tee -a "$out/steps.log"; grep -E '^(--- FAIL|FAIL|ok|panic)' "$out/tests.log" | head -20; grep -A12 -- '--- FAIL' "$out/tests.log" | head -60
log make-model; [ -d $m ] || timeout 120 $b make-model --shape llama3-8b --out $m >"$out/make-model.txt" 2>&1
sed -i 's/"max_position_embeddings": 8192/"max_position_embeddings": 40960/' $m/config.json
for v in "" 0; do
  for c in 32000 8192 512; do
    FT_DECODE_PIPE=$v timeout 60 $b bench --model $m --device cuda:0 --budgets resident --mode decode --context $c --iters 10 --warmup 2 --kernel-profile >"$out/decode-$c-$v.txt" 2>&1
    echo "pipe=${v:-1} ctx $c: $(grep -E 'attn_' "$out/decode-$c-$v.txt" | awk '{printf "%s %s ms %s GB/s; ", $1, $3, $6}') eager $(grep '^resident' "$out/decode-$c-$v.txt" | awk '{print $11}') $(grep replayed "$out/decode-$c-$v.txt" | sed 's/.*device: //')"
  done
  FT_DECODE_PIPE=$v timeout 60 $b bench --model $m --device cuda:0 --budgets resident --batch 64 --context 512 --iters 5 --warmup 2 --kernel-profile >"$out/batch64-$v.txt" 2>&1
  echo "pipe=${v:-1} batch 64: $(grep -E 'attn_' "$out/batch64-$v.txt" | awk '{printf "%s %s ms %s GB/s; ", $1, $3, $6}') $(grep '^resident' "$out/batch64-$v.txt")"
done
log done
