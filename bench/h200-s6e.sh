#!/usr/bin/env bash
# The sixth 2026-12-01 session's last GPU call (about 4 minutes), right
# after bench/h200-s6d.sh on the same machine: the hybrid plans (budget 0
# and 8 GiB + 16 host threads) in the bench and in run-model with the plan
# traces (FT_TRACE=1), the corrected --offload-timing table and run-model's
# median time a token; then run-model with workers spinning 10 ms between
# jobs and with 15 host threads (are cold host workers the 9.5 ms units?).
# Usage (repo root, GPU machine): bash bench/h200-s6e.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=230
[ -x $b ] || build_cuda
make_models
ids=37,235,396,72,255,393,203,133,335,448,144,129
log hybrid
FT_TRACE=1 timeout 150 $b bench --device cuda:0 --model $m --budgets 0,8GiB --mode decode --context 512 --iters 5 --host-threads 16 >"$out/hybrid.txt" 2>&1
grep -E '^(0|8GiB)' "$out/hybrid.txt" | sed 's/^/bench: /' | tee -a "$out/summary.txt"
rmodel() { # tag env... -- run-model args
  left || { echo "$1: skipped (time)" | tee -a "$out/summary.txt"; return; }
  local tag=$1; shift; local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" FT_TRACE=1 timeout 60 $b run-model --model $m --device cuda:0 --token-ids $ids --max-new-tokens 32 --ignore-eos "$@" >"$out/rm-$tag.txt" 2>&1
  echo "$tag: $(grep -E 'a token' "$out/rm-$tag.txt" | tail -1)" | tee -a "$out/summary.txt"
}
rmodel b0-timing NOOP=1 -- --gpu-budget 0 --host-threads 16 --offload-timing
rmodel b0 NOOP=1 -- --gpu-budget 0 --host-threads 16
rmodel b0-spin10ms FT_HOST_SPIN=10ms -- --gpu-budget 0 --host-threads 16
rmodel b0-t15 NOOP=1 -- --gpu-budget 0 --host-threads 15
rmodel 8g NOOP=1 -- --gpu-budget 8GiB --host-threads 16
finish
