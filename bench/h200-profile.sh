#!/usr/bin/env bash
# Where the time goes in the figures still open (issues 15, 18, 21): per-kernel
# tables of resident prefill 8,192, decode at 32,000 tokens of context, the
# batch-64 decode step, 64 × 512 packed prefill, and the FP8 checkpoint's
# resident decode step and prefill 2,048. No tests: a profiling call.
# Usage (repo root, GPU machine): bench/h200-profile.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
log() { echo "== $(date +%T) $*" | tee -a "$out/steps.log"; }
b=bin/infer-cuda; m=/tmp/llama3-8b
log build; timeout 150 make build-cuda >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
git rev-parse --short HEAD >"$out/commit.txt" 2>/dev/null
log make-model; [ -d $m ] || timeout 120 $b make-model --shape llama3-8b --out $m >"$out/make-model.txt" 2>&1
sed -i 's/"max_position_embeddings": 8192/"max_position_embeddings": 40960/' $m/config.json
log prefill-8k; timeout 90 $b bench --model $m --device cuda:0 --budgets resident --mode prefill --tokens 8192 --iters 2 --warmup 1 --kernel-profile >"$out/kprof-prefill-8k.txt" 2>&1; head -30 "$out/kprof-prefill-8k.txt"
log decode-32k; timeout 90 $b bench --model $m --device cuda:0 --budgets resident --mode decode --context 32000 --iters 5 --warmup 1 --kernel-profile >"$out/kprof-decode-32k.txt" 2>&1; head -24 "$out/kprof-decode-32k.txt"
log batch64; timeout 90 $b bench --model $m --device cuda:0 --budgets resident --batch 64 --context 512 --iters 5 --warmup 2 --kernel-profile >"$out/kprof-batch64.txt" 2>&1; head -30 "$out/kprof-batch64.txt"
log packed; timeout 90 $b bench --model $m --device cuda:0 --budgets resident --batch 64 --mode prefill --tokens 512 --iters 2 --warmup 1 --kernel-profile >"$out/kprof-packed.txt" 2>&1; head -30 "$out/kprof-packed.txt"
rm -rf $m; m=/tmp/llama3-8b-fp8
log make-fp8; timeout 150 $b make-model --shape llama3-8b --dtype fp8-channel --out $m >"$out/make-fp8.txt" 2>&1
log fp8-decode; timeout 60 $b bench --model $m --device cuda:0 --budgets resident --mode decode --context 512 --iters 20 --kernel-profile >"$out/kprof-fp8-decode.txt" 2>&1; head -24 "$out/kprof-fp8-decode.txt"
log fp8-prefill; timeout 60 $b bench --model $m --device cuda:0 --budgets resident --mode prefill --tokens 2048 --iters 3 --warmup 1 --kernel-profile >"$out/kprof-fp8-prefill.txt" 2>&1; head -24 "$out/kprof-fp8-prefill.txt"
log done
