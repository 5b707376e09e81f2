#!/usr/bin/env bash
# Session 19, call d (at most ~6 minutes, the session's last device time):
# more processes of budget 0 + host with exp4-packed streaming (s19c: three
# of three under 100 ms), and run-model at budget 0 + host with packing
# (its first-token time now that packing is faster; the steady median).
# Usage (repo root, GPU machine, carry .devtools): bash bench/h200-s19d.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=330
log start
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
MT=200 make_models
log figures
FT_TOKEN_TRACE=1 timeout 90 $b run-model --model $m --device cuda:0 --gpu-budget 0 --host-threads 16 --stream-codec exp4 \
  --token-ids 37,235,396,72,255,393,203,133,335,448,144,129 --ignore-eos --max-new-tokens 64 >"$out/rm0-exp4.txt" 2>&1
echo "run-model budget 0 + host exp4: $(grep 'tokens steady' "$out/rm0-exp4.txt" | tail -1) | $(tail -1 "$out/rm0-exp4.txt")" | tee -a "$out/summary.txt"
for i in 1 2 3 4 5; do
  HB=0 HI=10 HX="--stream-codec exp4" LEFT=290 hyb y$i NOOP=1
done
for f in "$out"/hyb-*.txt; do grep -E '^0\+host|timed forwards' "$f" | tail -2 | cut -c1-200 | sed "s/^/$(basename $f .txt): /"; done >>"$out/summary.txt"
finish
