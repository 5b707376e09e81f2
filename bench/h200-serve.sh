#!/usr/bin/env bash
# Issue 16 figures on the GPU machine: infer serve on the Llama-3-8B shape,
# resident with 128 concurrent streaming clients and at an 8 GiB weight budget
# with 64, 128-word prompts and 256 tokens out, measured by bench/loadgen.
# Usage (repo root, after `source .devtools/env.sh` and `make build-cuda`):
#   bench/h200-serve.sh OUTDIR [SECONDS]
set -uo pipefail
out=${1:?}; secs=${2:-40}; mkdir -p "$out"
b=bin/infer-cuda; m=/tmp/llama3-8b
[ -f $m/config.json ] || $b make-model --shape llama3-8b --out $m >"$out/make.txt" 2>&1
go build -o /tmp/ft-loadgen ./bench/loadgen/ft-loadgen || exit 1
run() { # name port clients server-args...
  local name=$1 port=$2 clients=$3; shift 3
  $b serve --model $m --device cuda:0 --port $port --max-concurrency $clients --queue 512 "$@" >"$out/serve-$name.log" 2>&1 &
  local pid=$!
  for i in $(seq 1 240); do curl -sf http://127.0.0.1:$port/health >/dev/null && break; sleep 0.5; done
  # a short warm-up (offloaded: the profiling passes), then the measured run
  /tmp/ft-loadgen --url http://127.0.0.1:$port --clients $clients --duration ${WARM:-10}s --prompt-words 128 --max-tokens 256 --completions >"$out/warm-$name.txt" 2>&1
  /tmp/ft-loadgen --url http://127.0.0.1:$port --clients $clients --duration ${secs}s --prompt-words 128 --max-tokens 256 --completions >"$out/load-$name.txt" 2>&1
  kill -TERM $pid; wait $pid
  echo "== $name"; cat "$out/load-$name.txt"
}
# The KV cache holds every client's 640 positions at once (8.4 KB each per
# layer pair: 128 × 640 × 128 KiB ≈ 10 GiB); serve's default is 2 GiB.
case "${ONLY:-all}" in
all|resident) run resident 8091 128 --kv-cache 12GiB ;;
esac
case "${ONLY:-all}" in
all|8gib) run 8gib 8092 64 --gpu-budget 8GiB --kv-cache 6GiB ;;
esac
