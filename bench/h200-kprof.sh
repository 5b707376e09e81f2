#!/usr/bin/env bash
# Where the time of a resident decode step goes (issue 21) and of a resident
# batched step (issue 15): the per-kernel tables of bench --kernel-profile
# for the Llama-3-8B shape, next to run-model's 256-token greedy generation.
# Usage (repo root, GPU machine): bench/h200-kprof.sh OUTDIR [skip-tests]
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
log() { echo "== $(date +%T) $*" | tee -a "$out/steps.log"; }
b=bin/infer-cuda; m=/tmp/llama3-8b; ids=37,235,396,72,255,393,203,133,335,448,144,129
log build; make build-cuda >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
git rev-parse --short HEAD >"$out/commit.txt" 2>/dev/null
if [ "${2:-}" != skip-tests ]; then
  log tests
  make -s test-cuda >"$out/test-cuda.log" 2>&1; echo "test-cuda rc=$?" | tee -a "$out/steps.log"
  grep -E '^(--- FAIL|FAIL|ok|panic)' "$out/test-cuda.log" | head -40
fi
log make-model; [ -d $m ] || $b make-model --shape llama3-8b --out $m >"$out/make-model.txt" 2>&1
log kprof-decode; $b bench --model $m --device cuda:0 --budgets resident --mode decode --context 512 --iters 20 --kernel-profile >"$out/kprof-decode.txt" 2>&1; cat "$out/kprof-decode.txt" | head -40
log kprof-batch; $b bench --model $m --device cuda:0 --budgets resident --batch 64 --context 512 --iters 5 --warmup 2 --kernel-profile >"$out/kprof-batch.txt" 2>&1; head -40 "$out/kprof-batch.txt"
log run-model-256; for i in 1 2; do $b run-model --model $m --device cuda:0 --token-ids $ids --max-new-tokens 256 --ignore-eos 2>&1 | tail -1; done | tee "$out/run-model-256.txt"
log done
