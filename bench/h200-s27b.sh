#!/usr/bin/env bash
# Session 27, call b: where the replayed resident FP8 decode step at 512
# spends its time, kernel by kernel with the dependent launches' overlap
# (nsys, graph nodes traced) and, where the machine allows GPU metrics,
# DRAM throughput in 5 µs samples (bench/nsys_step.py prints both); then
# the 8 GiB FP8 row twice more (s27a: 2.87 ms against a plan floor of 2.67).
# Usage (repo root, GPU machine): bash bench/h200-s27b.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=400
start_call
make_fp8
ns=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
log "nsys: ${ns:-none}"
R="--model $f8 --device cuda:0 --budgets resident --mode decode --context 512 --iters 5"
if [ -n "$ns" ]; then
  timeout 150 $ns profile --cuda-graph-trace=node -t cuda --gpu-metrics-devices=0 --gpu-metrics-frequency=200000 \
    -o /tmp/f8step --force-overwrite true $b bench $R >"$out/nsys-f8.log" 2>&1 ||
  timeout 150 $ns profile --cuda-graph-trace=node -t cuda -o /tmp/f8step --force-overwrite true $b bench $R >>"$out/nsys-f8.log" 2>&1
  timeout 90 $ns export --type sqlite -o /tmp/f8step.sqlite --force-overwrite true /tmp/f8step.nsys-rep >>"$out/nsys-f8.log" 2>&1
  python3 bench/nsys_step.py /tmp/f8step.sqlite >"$out/f8step.txt" 2>&1
  head -3 "$out/f8step.txt" | tee -a "$out/summary.txt"
fi
BT=120 one f8-8g-b -- --model $f8 --budgets 8GiB --mode decode --context 512 --iters 10
BT=120 one f8-8g-c -- --model $f8 --budgets 8GiB --mode decode --context 512 --iters 10
finish
