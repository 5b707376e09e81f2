#!/usr/bin/env bash
# The fifth 2026-12-01 session's last GPU call (about 5 minutes), right
# after bench/h200-s5d.sh: ../shared/peers/peer_batch.py (carried in
# .peer/; transformers eager resident, a pinned one-layer-ahead streamer,
# accelerate device_map at 8 GiB) at B = 64 and 256, then the FP8 prefill
# of 2,048 tokens against the BF16 one in the same call (the BF16 prefill
# changed with the wg attention).
# Usage (repo root, GPU machine): bash bench/h200-s5e.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"; t0=$(date +%s)
log() { echo "== $(date +%T) +$(( $(date +%s) - t0 ))s $*" | tee -a "$out/steps.log"; }
left() { [ $(( $(date +%s) - t0 )) -lt ${1:-420} ]; }
b=bin/infer-cuda; m=/tmp/llama3-8b; f8=/tmp/llama3-8b-fp8
log peer
timeout 300 python3 .peer/peer_batch.py 64,256 >"$out/peer_batch.txt" 2>&1; echo "peer_batch rc=$?" >>"$out/summary.txt"
grep -E "B=" "$out/peer_batch.txt" | sed 's/^/peer: /' | tee -a "$out/summary.txt"
log build; timeout 170 make build-cuda >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
[ -d $m ] || timeout 120 $b make-model --shape llama3-8b --out $m >"$out/make-model.txt" 2>&1
left 330 && { log make-fp8; timeout 90 $b make-model --shape llama3-8b --dtype fp8-channel --out $f8 >"$out/make-fp8.txt" 2>&1; }
one() { # tag model -- bench args
  left || { echo "$1: skipped (time)" | tee -a "$out/summary.txt"; return; }
  local tag=$1 f="$out/$1.txt"; shift
  timeout 60 $b bench --device cuda:0 --budgets resident "$@" >"$f" 2>&1
  echo "$tag: $(grep -E '^resident' "$f" | tr -s ' ')" | tee -a "$out/summary.txt"
}
log benches
one pre2k --model $m --mode prefill --tokens 2048 --iters 3 --warmup 1
one fp8pre --model $f8 --mode prefill --tokens 2048 --iters 3 --warmup 1
one pre2k-b --model $m --mode prefill --tokens 2048 --iters 3 --warmup 1
log done
cd "$out" && tar czf all.tgz *.txt *.log 2>/dev/null; true
