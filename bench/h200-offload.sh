#!/usr/bin/env bash
# The offload and profile figures of bench/RESULTS.md, in one run on the GPU
# machine: build, a Llama-3-8B-shaped checkpoint, the PyTorch peers, infer
# bench at several budgets, and restarts with and without a profile.
# Usage (from the repo root there): bench/h200-offload.sh OUTDIR [PEER.py]
set -uo pipefail
out=${1:?output directory}; peer=${2:-}
mkdir -p "$out"
log() { echo "== $(date +%T) $*" | tee -a "$out/steps.log"; }
bin=bin/infer-cuda
m=/tmp/llama3-8b
log build;        make build-cuda >"$out/build.log" 2>&1 || { cat "$out/build.log"; exit 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$out/gpu.txt"
log make-model;   /usr/bin/time -v $bin make-model --shape llama3-8b --out $m >"$out/make-model.txt" 2>&1
du -sb $m >>"$out/make-model.txt"
log bench-decode
$bin bench --model $m --device cuda:0 --budgets 0,4GiB,8GiB,12GiB,resident --mode decode --context 512 --iters 10 --json >"$out/bench-decode.jsonl" 2>"$out/bench-decode.err"
if [ -n "$peer" ]; then
  log peer;       PYTHONUNBUFFERED=1 timeout 300 python3 "$peer" >"$out/peer.txt" 2>&1
fi
log bench-prefill
$bin bench --model $m --device cuda:0 --budgets 0,resident --mode prefill --tokens 8192 --iters 3 --warmup 1 --json >"$out/bench-prefill8192.jsonl" 2>"$out/bench-prefill.err"
$bin bench --model $m --device cuda:0 --budgets 0,8GiB --mode prefill --tokens 2048 --iters 3 --warmup 1 --json >"$out/bench-prefill2048.jsonl" 2>>"$out/bench-prefill.err"
log profile
$bin profile --model $m --device cuda:0 --gpu-budget 8GiB --out /tmp/p8 >"$out/profile.txt" 2>&1
ids=128000,9906,11,1917,0
log restart-cold-noprofile
sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null && echo dropped >"$out/cache.txt" || echo "could not drop caches" >"$out/cache.txt"
$bin run-model --model $m --device cuda:0 --gpu-budget 8GiB --token-ids $ids --max-new-tokens 1 --json >"$out/run-noprofile.json" 2>"$out/run-noprofile.err"
log restart-profile-warm
$bin run-model --model $m --device cuda:0 --profile /tmp/p8 --strict --token-ids $ids --max-new-tokens 1 --json >"$out/run-profile-warm.json" 2>"$out/run-profile.err"
log cat-warm;     /usr/bin/time -f "%e s" cat $m/*.safetensors >/dev/null 2>"$out/cat-warm.txt"
log restart-profile-cold
sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null
$bin run-model --model $m --device cuda:0 --profile /tmp/p8 --strict --token-ids $ids --max-new-tokens 1 --json >"$out/run-profile-cold.json" 2>>"$out/run-profile.err"
sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null
log cat-cold;     /usr/bin/time -f "%e s" cat $m/*.safetensors >/dev/null 2>"$out/cat-cold.txt"
log timing-table
$bin run-model --model $m --device cuda:0 --profile /tmp/p8 --token-ids $ids --max-new-tokens 8 --offload-timing >"$out/timing.txt" 2>&1
log done
