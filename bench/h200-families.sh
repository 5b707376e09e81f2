#!/usr/bin/env bash
# Issue 14 figures on the GPU machine: the qwen3-8b shape (random bf16
# weights), decode at context 512 resident, everything streamed and at an
# 8 GiB weight budget, each next to its floor. Output in OUTDIR.
# Usage (repo root, after `source .devtools/env.sh` and `make build-cuda`):
#   bench/h200-families.sh OUTDIR
set -uo pipefail
out=${1:?}; mkdir -p "$out"
b=bin/infer-cuda
for shape in qwen3-8b; do
  m=/tmp/$shape
  [ -f $m/config.json ] || $b make-model --shape $shape --out $m >"$out/make-$shape.txt" 2>&1
  $b bench --model $m --device cuda:0 --budgets 0,8GiB,resident --mode decode --context 512 --iters 10 --json >"$out/bench-$shape.jsonl" 2>"$out/bench-$shape.err"
  echo "== $shape"; cut -c1-420 "$out/bench-$shape.jsonl"; tail -n 3 "$out/bench-$shape.err"
  rm -rf $m
done
