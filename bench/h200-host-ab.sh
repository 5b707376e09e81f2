#!/usr/bin/env bash
# Host-layer A/B on the GPU machine (issue 20): the host kernels alone
# (bench-host; one Llama-3-8B-shape layer on the host backend at 16 threads
# against its GEMVs alone, no GPU involved) and batch-1 decode with host
# placement, each with the pool's defaults (spin 50us, GEMV chunks capped
# at 512 KiB; bench-host also at 256 and 1024) and with both off (FT_HOST_SPIN=0 FT_HOST_CHUNK_KIB=-1: the
# earlier pool's behaviour: park at once, ~4 chunks per thread), then
# run-model's timing table. About 4 minutes.
# Usage (repo root, GPU machine): bench/h200-host-ab.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
log() { echo "== $(date +%T) $*" | tee -a "$out/steps.log"; }
b=bin/infer-cuda; m=/tmp/llama3-8b; ids=37,235,396,72,255,393,203,133,335,448,144,129
log build; timeout 150 make build-cuda >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
git rev-parse --short HEAD >"$out/commit.txt" 2>/dev/null
log make-model; [ -d $m ] || timeout 120 $b make-model --shape llama3-8b --out $m >"$out/make-model.txt" 2>&1
for v in default off; do
  env=(); [ $v = off ] && env=(FT_HOST_SPIN=0 FT_HOST_CHUNK_KIB=-1)
  log "host layer ($v)"
  env "${env[@]}" FT_HOSTLAYER_THREADS=16 timeout 120 go test -run XXX -bench 'HostLayer' -benchtime 200x -count 3 ./models/decoder 2>&1 | tee "$out/hostlayer-$v.txt" | grep Bench
  log "bench-host ($v)"
  env "${env[@]}" timeout 40 $b bench-host --threads 16 --kinds bf16 --tokens 1,4 2>&1 | tee "$out/bench-host-$v.txt" | tail -14
  [ $v = default ] && for kib in 256 1024; do FT_HOST_CHUNK_KIB=$kib timeout 40 $b bench-host --threads 16 --kinds bf16 --tokens 1 2>&1 | tee "$out/bench-host-chunk$kib.txt" | tail -7; done
  log "bench decode ($v)"
  env "${env[@]}" timeout 150 $b bench --model $m --device cuda:0 --budgets 0,8GiB --mode decode --context 512 --iters 5 --warmup 6 --host-threads 16 2>&1 | tee "$out/bench-decode-$v.txt" | tail -8
done
log run-model; timeout 90 $b run-model --model $m --device cuda:0 --gpu-budget 0 --host-threads 16 --token-ids $ids --max-new-tokens 32 --ignore-eos --offload-timing 2>&1 | tee "$out/run-model.txt" | tail -50
log done
