#!/usr/bin/env bash
# The figures still open at the end of the 2026-12-01 session, in one GPU
# call: the one-GPU NCCL/sharded and host-placement GPU tests; infer serve at
# an 8 GiB budget with 64 clients (issue 16); resident long-context decode at
# 32,000 tokens and prefill of 8,192 (issue 15; the made checkpoint's
# max_position_embeddings raised to 40,960 for it); the hybrid plans (issue
# 20); the MoE resident step with the staged decode attention's positions per
# block at 64, 32 and 16 (issue 17, FT_DECODE_SPLIT).
# Usage (repo root, GPU machine): bench/h200-closing.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
log() { echo "== $(date +%T) $*" | tee -a "$out/steps.log"; }
b=bin/infer-cuda; m=/tmp/llama3-8b; ids=37,235,396,72,255,393,203,133,335,448,144,129
log build; timeout 150 make build-cuda >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
log tests
GOFLAGS='-run=TestShardedNCCLOneGPU|TestShardedGPUs|TestNCCL|TestHostPlacementDevice|TestHostMeasuredReplan' timeout 150 make -s test-cuda CUDA_PKGS='./runtime/cuda ./session ./models/all' >"$out/tests.log" 2>&1
echo "tests rc=$?" | tee -a "$out/steps.log"; grep -E '^(--- FAIL|FAIL|ok|panic)|--- SKIP' "$out/tests.log" | head -20
log make-model; [ -d $m ] || timeout 120 $b make-model --shape llama3-8b --out $m >"$out/make-model.txt" 2>&1
log serve-8gib; ONLY=8gib WARM=10 timeout 150 bench/h200-serve.sh "$out/serve" 30 2>&1 | tail -6
log hybrid; timeout 120 $b bench --model $m --device cuda:0 --budgets 0,8GiB --mode decode --context 512 --iters 5 --warmup 6 --host-threads 16 2>&1 | tee "$out/hybrid.txt" | tail -5
log long-context
sed -i 's/"max_position_embeddings": 8192/"max_position_embeddings": 40960/' $m/config.json
timeout 120 $b bench --model $m --device cuda:0 --budgets resident --mode decode --context 32000 --iters 5 --warmup 1 2>&1 | tee "$out/decode-32k.txt" | tail -2
timeout 90 $b bench --model $m --device cuda:0 --budgets resident --mode prefill --tokens 8192 --iters 3 --warmup 1 2>&1 | tee "$out/prefill-8k.txt" | tail -1
log moe; rm -rf $m; timeout 120 $b make-model --shape qwen3-30b-a3b-24l --out /tmp/q3 >/dev/null 2>&1
for s in "" 32 16; do
  FT_DECODE_SPLIT=$s timeout 60 $b bench --model /tmp/q3 --device cuda:0 --budgets resident --mode decode --context 512 --iters 20 --kernel-profile >"$out/moe-split${s:-64}.txt" 2>&1
  echo "split ${s:-64}: $(grep -E 'attn_decode_d128|attn_combine' "$out/moe-split${s:-64}.txt" | awk '{printf "%s %s ms; ", $1, $3}') $(grep replayed "$out/moe-split${s:-64}.txt")"
done
log done
