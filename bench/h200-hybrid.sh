#!/usr/bin/env bash
# Hybrid offload (issue 20): host placement on the GPU machine, Llama-3-8B
# shape. The cuda test of a forward with a host-computed layer (main device
# cuda:0, kernels/host on a CPU device), the host's read bandwidth, then
# bench's two-way and three-way ("B+host") rows at budgets 0 and 8 GiB for
# batch-1 decode and a 512-token prefill, and run-model's timing table with
# host threads. Each step under timeout; about 5 minutes in all.
# Usage (repo root, GPU machine): bench/h200-hybrid.sh OUTDIR [skip-tests]
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
log() { echo "== $(date +%T) $*" | tee -a "$out/steps.log"; }
b=bin/infer-cuda; m=/tmp/llama3-8b; ids=37,235,396,72,255,393,203,133,335,448,144,129
log build; timeout 150 make build-cuda >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
git rev-parse --short HEAD >"$out/commit.txt" 2>/dev/null
if [ "${2:-}" != skip-tests ]; then
  log tests
  GOFLAGS='-run=TestHostPlacementDevice' timeout 120 make -s test-cuda CUDA_PKGS=./models/all >"$out/test-cuda.log" 2>&1
  echo "test-cuda rc=$?" | tee -a "$out/steps.log"
  grep -E '^(--- FAIL|FAIL|ok|panic)|cuda:0' "$out/test-cuda.log" | head -40
fi
log make-model; [ -d $m ] || timeout 120 $b make-model --shape llama3-8b --out $m >"$out/make-model.txt" 2>&1
log bench-host; timeout 30 $b bench-host --threads 16 2>&1 | tee "$out/bench-host.txt" | tail -20
log bench-decode; timeout 120 $b bench --model $m --device cuda:0 --budgets 0,8GiB --mode decode --context 512 --iters 5 --host-threads 16 2>&1 | tee "$out/bench-decode.txt" | tail -8
log bench-prefill; timeout 90 $b bench --model $m --device cuda:0 --budgets 0,8GiB --mode prefill --tokens 512 --iters 2 --host-threads 16 2>&1 | tee "$out/bench-prefill.txt" | tail -8
log run-model; timeout 90 $b run-model --model $m --device cuda:0 --gpu-budget 0 --host-threads 16 --token-ids $ids --max-new-tokens 32 --ignore-eos --offload-timing 2>&1 | tee "$out/run-model.txt" | tail -50
log done
