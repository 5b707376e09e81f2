#!/usr/bin/env bash
# Issue 18 figures on the GPU machine: the Llama-3-8B shape with FP8 weights
# (per-channel, compressed-tensors layout) decode at context 512 everything
# streamed, at 8 GiB and resident, prefill 2048 resident; and the BF16
# checkpoint streamed as FP8 (--stream-dtype fp8). Output in OUTDIR.
# Usage (repo root, after `source .devtools/env.sh` and `make build-cuda`):
#   bench/h200-fp8.sh OUTDIR
set -uo pipefail
out=${1:?}; mkdir -p "$out"
b=bin/infer-cuda; m=/tmp/llama3-8b-fp8
[ -f $m/config.json ] || $b make-model --shape llama3-8b --dtype fp8-channel --out $m >"$out/make-fp8.txt" 2>&1
$b bench --model $m --device cuda:0 --budgets 0,8GiB,resident --mode decode --context 512 --iters 10 --json >"$out/fp8-decode.jsonl" 2>"$out/fp8-decode.err"
$b bench --model $m --device cuda:0 --budgets resident --mode prefill --tokens 2048 --iters 3 --warmup 1 --json >"$out/fp8-prefill.jsonl" 2>"$out/fp8-prefill.err"
rm -rf $m
m=/tmp/llama3-8b
[ -f $m/config.json ] || $b make-model --shape llama3-8b --out $m >"$out/make-bf16.txt" 2>&1
$b bench --model $m --device cuda:0 --budgets resident --mode prefill --tokens 2048 --iters 3 --warmup 1 --json >"$out/bf16-prefill.jsonl" 2>"$out/bf16-prefill.err"
$b bench --model $m --device cuda:0 --stream-dtype fp8 --budgets 0,8GiB --mode decode --context 512 --iters 10 --json >"$out/streamfp8-decode.jsonl" 2>"$out/streamfp8-decode.err"
for f in "$out"/*.jsonl; do echo "== $f"; cut -c1-430 "$f"; done
for f in "$out"/*.err; do tail -n 2 "$f"; done
