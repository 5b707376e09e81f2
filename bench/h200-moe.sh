#!/usr/bin/env bash
# Issue 17, the resident MoE decode path: the qwen3-30b-a3b-24l shape (24
# layers, 128 experts of 768, top 8; 31.2 GB bf16, random weights) resident
# on the H200: decode at context 512 with the per-kernel table (the fused
# expert kernels moe_route_f32, moe_gateup_bf16, moe_down_f32out) and the
# step replayed as a CUDA graph, batch 1 and 16, and run-model's 128-token
# greedy generation; the GPU tests of the fused path first. The disk (64
# GiB) cannot hold the Llama-3-8B model (16 GB) next to this one: it is
# deleted. Under 8 minutes (build ~1, tests ~1, make-model ~0.5, the rest
# ~3). Output in OUTDIR.
# Usage (repo root, GPU machine): bench/h200-moe.sh OUTDIR [skip-tests]
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
log() { echo "== $(date +%T) $*" | tee -a "$out/steps.log"; }
b=bin/infer-cuda; m=/tmp/q3moe24; ids=37,235,396,72,255,393,203,133,335,448,144,129
log build; make build-cuda >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
git rev-parse --short HEAD >"$out/commit.txt" 2>/dev/null
if [ "${2:-}" != skip-tests ]; then
  log tests
  # make's CUDA_ENV sets the cgo flags; GOFLAGS carries -run to go test.
  { GOFLAGS='-run=TestMoERouteGPU|TestMoEFusedGPU|TestMoERowOps' make -s test-cuda CUDA_PKGS=./kernels/cudabackend
    GOFLAGS='-run=TestMoEFusedEveryDevice|TestMoEEveryDevice|TestMoEOffloadEqualsResident|TestAnnouncedUnitsEqualResident|TestGPUAnnouncedUnits|TestBenchMoEGraphCUDA' \
      make -s test-cuda CUDA_PKGS='./models/all ./offload ./cmd/infer'; } >"$out/tests.log" 2>&1
  echo "tests rc=$?" | tee -a "$out/steps.log"
  grep -E '^(--- FAIL|FAIL|ok|panic)|moefused_test|moe_test' "$out/tests.log" | head -40
fi
log make-model; rm -rf /tmp/llama3-8b
[ -f $m/config.json ] || $b make-model --shape qwen3-30b-a3b-24l --out $m >"$out/make-model.txt" 2>&1
df -h /tmp | tail -1 | tee -a "$out/steps.log"
log decode-kprof; $b bench --model $m --device cuda:0 --budgets resident --mode decode --context 512 --iters 20 --kernel-profile >"$out/decode-kprof.txt" 2>&1
head -45 "$out/decode-kprof.txt"; grep -E 'replayed as a CUDA graph' "$out/decode-kprof.txt"
log batch; $b bench --model $m --device cuda:0 --budgets resident --batch 1,16 --context 512 --iters 10 --warmup 2 >"$out/batch.txt" 2>&1; cat "$out/batch.txt"
log run-model-128; for i in 1 2; do $b run-model --model $m --device cuda:0 --token-ids $ids --max-new-tokens 128 --ignore-eos 2>&1 | tail -1; done | tee "$out/run-model-128.txt"
log offload-8gib; timeout 150 $b bench --model $m --device cuda:0 --budgets 8GiB --mode decode --context 512 --iters 10 >"$out/decode-8gib.txt" 2>&1; cat "$out/decode-8gib.txt"
log offload-8gib-batch; timeout 120 $b bench --model $m --device cuda:0 --budgets 8GiB --batch 1,16 --context 512 --iters 5 --warmup 2 >"$out/batch-8gib.txt" 2>&1; cat "$out/batch-8gib.txt"
log offload-8gib-timing; timeout 120 $b run-model --model $m --device cuda:0 --gpu-budget 8GiB --token-ids $ids --max-new-tokens 64 --ignore-eos --offload-timing >"$out/run-8gib-timing.txt" 2>&1; grep -iE 'expert|hit|pool|tokens in|predicted|measured' "$out/run-8gib-timing.txt" | head -20
# PEER (the lead copies /work/shared/peers/peer_moe.py into the repo first):
log peer; [ -f bench/peer_moe.py ] && timeout 240 python3 bench/peer_moe.py 24 >"$out/peer.txt" 2>&1; tail -5 "$out/peer.txt" 2>/dev/null
log done
