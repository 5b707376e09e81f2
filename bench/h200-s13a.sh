#!/usr/bin/env bash
# Session 13, call a (about 6 minutes): issue 21's Qwen3-8B part, never
# measured with the replayed step: the qwen3-8b shape (36 layers, per-head
# q/k RMSNorm, vocab 151936) resident, the step at 512 with its kernel table,
# run-model 256 tokens, the step at 8,192; the Llama-3-8B shape's step and
# run-model in the same call for comparison.
# Usage (repo root, GPU machine): bash bench/h200-s13a.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=560
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
q3=/tmp/qwen3-8b
(MT=240 make_models) &
timeout 240 $b make-model --shape qwen3-8b --out $q3 >"$out/make-model-q3.txt" 2>&1
sed -i 's/"max_position_embeddings": [0-9]*/"max_position_embeddings": 40960/' $q3/config.json
log q3-ready
D="--budgets resident --mode decode --iters 20"
one q3-512 NOOP=1 -- --model $q3 $D --context 512
one q3-512-kprof NOOP=1 -- --model $q3 $D --context 512 --kernel-profile
m=$q3 rmodel q3 NOOP=1 -- --max-new-tokens 256
one q3-8k NOOP=1 -- --model $q3 $D --context 8192
wait
log llama-ready
one bf16-512 NOOP=1 -- --model $m $D --context 512
rmodel bf16 NOOP=1 -- --max-new-tokens 256
m=$q3 rmodel q3b NOOP=1 -- --max-new-tokens 256
finish
