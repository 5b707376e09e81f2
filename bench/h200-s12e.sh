#!/usr/bin/env bash
# Session 12, call e (about 5 minutes): the review fixes on the GPU. The
# offload pre-flight check (budget and transfer blocks against the device's
# free memory at Offload) now runs on every device of known size, a GPU
# included; the sampling validation moved into kernels.SampleParams. GPU
# tests of the offload, hybrid and batch paths, then the hybrid bench at
# budgets 0 and 8 GiB, run-model at 8 GiB + host and with sampling, and
# serve refusing a budget the KV cache leaves no room for.
# Usage (repo root, GPU machine): bash bench/h200-s12e.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=540
compile_tests models/all
build_cuda
wait
export FT_KERNEL_CACHE=$PWD/bin/kernels
(MT=240 make_models) &
log tests
TT=200 runt model all models/all 'TestOffloadedEqualsResident|TestHostPlacementDevice|TestBatchOffloaded|TestBatchEveryDevice|TestMoEOffloadEqualsResident|TestFusedDecodeSwitchesGPU'
cat "$out/tests.txt" | tee -a "$out/summary.txt"
wait
log models-ready
HB=0,8GiB HI=8 hyb closing NOOP=1
rmodel host8 NOOP=1 -- --gpu-budget 8GiB --host-threads 16 --max-new-tokens 32
rmodel sampled NOOP=1 -- --temperature 0.8 --top-p 0.9 --max-new-tokens 16
rmodel stream0 NOOP=1 -- --gpu-budget 0 --max-new-tokens 8
# serve must refuse a budget plus KV cache over the device (exit 1, naming both)
timeout 60 $b serve --model $m --device cuda:0 --gpu-budget 130GiB --kv-cache 20GiB --port 0 >"$out/serve-refuse.txt" 2>&1
echo "serve refuse rc=$?: $(tail -1 "$out/serve-refuse.txt" | cut -c1-300)" | tee -a "$out/summary.txt"
finish
