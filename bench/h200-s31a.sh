#!/usr/bin/env bash
# Session 31, call a: session 30's last commits on a GPU (the cluster
# merges through one cluster_combine; infer bench's generation line) and
# the idle step graph (an offloaded model whose plan streams nothing
# replays its one-token forwards as one recorded step). (1) tests:
# TestIdleStepGraphGPU, TestDecodeClusterGPU, TestDependentLaunchDecodeKernels,
# argmax and capture tests; models/all GPU/golden/batch and FP8. (2) the
# HBM rate (BenchmarkCopyD2D); FP8 and BF16 resident steps at 512 (graph
# and generation lines); the 8 GiB FP8 row with the idle step graph and
# without (FT_IDLE_STEP_GRAPH=0), interleaved; run-model of the FP8 model
# at 8 GiB and of the BF16 model resident.
# Usage (repo root, GPU machine): bash bench/h200-s31a.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=540
start_call kernels/cudabackend models/all bench
make_fp8
log tests
TT=150 runt kern cudabackend kernels/cudabackend 'TestDependentLaunchDecodeKernels|TestDecodeClusterGPU|Argmax|TestEnvSwitch|TestCapturedStep|TestDecodePipeCapturedStep'
TT=150 runt models all models/all 'GPU|TestGolden|TestBatch|IdleStep'
TT=60 runt models-fp8 all models/all 'FP8'
tests_done || { finish; exit 0; }
log d2d
(cd bench && timeout 120 /tmp/t/bench.test -test.run '^$' -test.bench 'CopyD2D$' -test.benchtime 20x >"$out/d2d.txt" 2>&1)
grep -E "CopyD2D" "$out/d2d.txt" | head -3 >>"$out/summary.txt"
R="--budgets resident --mode decode --context 512"
G="--model $f8 --budgets 8GiB --mode decode --context 512 --iters 10"
log bench
one f8-a -- --model $f8 $R --iters 20
one f8-8g-a -- $G
one f8-8g-eager-a FT_IDLE_STEP_GRAPH=0 -- $G
one f8-b -- --model $f8 $R --iters 20
one f8-8g-b -- $G
one f8-8g-eager-b FT_IDLE_STEP_GRAPH=0 -- $G
one bf -- --model $m $R --iters 20
if left; then
  log rm-f8-8g
  timeout 90 $b run-model --model $f8 --device cuda:0 --gpu-budget 8GiB \
    --token-ids 37,235,396,72,255,393,203,133,335,448,144,129 --ignore-eos --max-new-tokens 256 >"$out/rm-f8-8g.txt" 2>&1
  tail -1 "$out/rm-f8-8g.txt" | sed "s/^/run-model f8 8GiB: /" | tee -a "$out/summary.txt"
fi
rmodel bf -- --max-new-tokens 256
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu --format=csv >>"$out/summary.txt" 2>&1
finish
