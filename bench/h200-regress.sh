#!/usr/bin/env bash
# Regression run on the GPU machine: process start to first token of the
# bundled tiny model on cuda:0 (first run on the machine, then the next),
# and the Llama-3-8B-shape figures of bench/RESULTS.md (resident decode,
# prefill 2048, everything streamed, 8 GiB). Everything lands in OUTDIR.
# Usage (repo root, on the GPU machine, after `source .devtools/env.sh`):
#   bench/h200-regress.sh OUTDIR
set -uo pipefail
out=${1:?}; mkdir -p "$out"
log() { echo "== $(date +%T) $*" | tee -a "$out/steps.log"; }
b=bin/infer-cuda; m=/tmp/llama3-8b; ids=37,235,396,72,255,393,203,133,335,448,144,129
log build; make build-cuda >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
git rev-parse --short HEAD >"$out/commit.txt" 2>/dev/null
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$out/gpu.txt"
for run in first second third; do
  log "start-to-first-token $run"
  t0=$(date +%s%N)
  FT_TRACE=1 /usr/bin/time -f "%e s wall" -o "$out/start-$run.txt" $b run-model --device cuda:0 --token-ids $ids --max-new-tokens 1 --json >"$out/start-$run.json" 2>"$out/start-$run.err"
  t1=$(grep -o 'first token at unix [0-9]*' "$out/start-$run.err" | grep -o '[0-9]*$')
  echo "exec to first token: $(( (t1 - t0) / 1000000 )) ms" >>"$out/start-$run.txt"
  cat "$out/start-$run.txt"
done
log make-model; $b make-model --shape llama3-8b --out $m >"$out/make-model.txt" 2>&1
log bench-decode; $b bench --model $m --device cuda:0 --budgets 0,8GiB,resident --mode decode --context 512 --iters 10 --json >"$out/bench-decode.jsonl" 2>"$out/bench-decode.err"
log bench-prefill; $b bench --model $m --device cuda:0 --budgets 0,8GiB,resident --mode prefill --tokens 2048 --iters 3 --warmup 1 --json >"$out/bench-prefill.jsonl" 2>"$out/bench-prefill.err"
cut -c1-600 "$out"/bench-*.jsonl; for f in "$out"/bench-*.err; do tail -n 3 "$f"; done
log done
