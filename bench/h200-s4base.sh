#!/usr/bin/env bash
# The fourth 2026-12-01 session's first GPU call (about 3 minutes): the GPU
# tests of the last session's changes that had not run on a GPU (the shared
# decode_group step, the review fixes, the relaxed FP8 tests), then where a
# graph-replayed decode step's time goes: run-model 256 tokens under Nsight
# Systems with graph nodes traced (per-kernel time inside the graph), if
# nsys is on the machine, and the eager kernel profile of the batch-64 step.
# Usage (repo root, GPU machine): bench/h200-s4base.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
log() { echo "== $(date +%T) $*" | tee -a "$out/steps.log"; }
b=bin/infer-cuda; m=/tmp/llama3-8b; ids=37,235,396,72,255,393,203,133,335,448,144,129
log build; timeout 150 make build-cuda >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
log tests
GOFLAGS='-run=TestDecodeMMA|TestPagedDecodeMMA|TestDecodePipePositions|TestMatMulFP8Lt|TestQuantRowsE4M3|TestFP8GEMVv|TestBatchEveryDevice|TestDependentLaunch' \
  timeout 200 make -s test-cuda CUDA_PKGS='./kernels/cudabackend ./models/all' >"$out/tests.log" 2>&1
echo "tests rc=$?" | tee -a "$out/steps.log"; grep -E '^(--- FAIL|FAIL|ok|panic)' "$out/tests.log" | head; grep -A8 -- '--- FAIL' "$out/tests.log" | head -40
log make-model; timeout 120 $b make-model --shape llama3-8b --out $m >"$out/make-model.txt" 2>&1
ns=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
echo "nsys: ${ns:-none}" | tee -a "$out/steps.log"
if [ -n "$ns" ]; then
  log nsys-run-model
  timeout 120 $ns profile --cuda-graph-trace=node -t cuda -o "$out/rm" --force-overwrite true $b run-model --model $m --device cuda:0 --token-ids $ids --max-new-tokens 256 --ignore-eos >"$out/nsys-rm.log" 2>&1
  timeout 60 $ns stats -r cuda_gpu_kern_sum --format csv -o "$out/rm" "$out/rm.nsys-rep" >/dev/null 2>&1
  timeout 60 $ns stats -r cuda_gpu_trace --format csv -o "$out/rmtrace" "$out/rm.nsys-rep" >/dev/null 2>&1
  ls "$out" | tee -a "$out/steps.log"; head -30 "$out"/rm_cuda_gpu_kern_sum.csv
  xz -T4 "$out"/rmtrace*.csv 2>/dev/null; rm -f "$out/rm.nsys-rep" "$out"/*.sqlite
fi
log run-model; timeout 30 $b run-model --model $m --device cuda:0 --token-ids $ids --max-new-tokens 256 --ignore-eos 2>&1 | tail -1 | tee -a "$out/steps.log"
log batch64; timeout 60 $b bench --model $m --device cuda:0 --budgets resident --batch 64 --context 512 --iters 5 --warmup 2 --kernel-profile >"$out/kprof-batch64.txt" 2>&1; head -30 "$out/kprof-batch64.txt"
log done
