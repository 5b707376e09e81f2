#!/usr/bin/env bash
# Session 19, call b (about 7 minutes): more processes of issue 20's budget
# 0 + host, the spread s19a found (91.94-110.11 ms over five). Eight
# `infer bench --budgets 0 --host-threads 16` processes and three
# `run-model --gpu-budget 0 --host-threads 16` ones (96 tokens,
# FT_TOKEN_TRACE=1: its steady median), interleaved, then the host kernels'
# STREAM-like read again.
# Usage (repo root, GPU machine, carry .devtools): bash bench/h200-s19b.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=560
log start
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
MT=240 make_models
rm0() {
  left 520 || return
  log "run-model $1"
  FT_TOKEN_TRACE=1 timeout 60 $b run-model --model $m --device cuda:0 --gpu-budget 0 --host-threads 16 \
    --token-ids 37,235,396,72,255,393,203,133,335,448,144,129 --ignore-eos --max-new-tokens 96 >"$out/rm0-$1.txt" 2>&1
  echo "rm0 $1: $(grep -iE 'steady' "$out/rm0-$1.txt" | tail -2 | tr '\n' ' ') | $(tail -1 "$out/rm0-$1.txt")" | tee -a "$out/summary.txt"
}
for i in 1 2 3 4; do
  HB=0 HI=10 LEFT=500 hyb c$i NOOP=1
  [ $i -le 3 ] && rm0 $i
  HB=0 HI=10 LEFT=510 hyb d$i NOOP=1
done
timeout 60 $b bench-host --threads 16 --kinds bf16 --tokens 1 --shapes gateup >"$out/bench-host.txt" 2>&1
grep -iE 'read bandwidth|gate' "$out/bench-host.txt" | tee -a "$out/summary.txt"
for f in "$out"/hyb-*.txt; do echo "$(basename $f .txt): $(grep -m1 'host block rates' $f | grep -o 'median [0-9.]*') $(grep '^0+host' $f | tr -s ' ')"; done | tee -a "$out/summary.txt"
finish
