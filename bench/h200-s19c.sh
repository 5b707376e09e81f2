#!/usr/bin/env bash
# Session 19, call c (about 9 minutes): exp4-packed streaming
# (--stream-codec exp4) on the H200. Tests first: exp4_unpack against the
# reference (TestUnpackExp4GPU), its rate on one Llama-3-8B layer
# (TestUnpackExp4Rate), TestStreamExp4 (CPU device) and run-model at
# budget 0 with and without packing (the same 32 greedy ids). Then, on the
# Llama-3-8B shape at context 512: everything streamed GPU-only, none vs
# exp4 (interleaved); budget 0 + host and 8 GiB + host with exp4 (three
# processes) and without (one, same machine); prefill 512 at budget 0.
# Usage (repo root, GPU machine, carry .devtools): bash bench/h200-s19c.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=570
log start
compile_tests kernels/cudabackend models/all
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
MT=240 make_models
wait
log tests
TT=120 runt kern cudabackend kernels/cudabackend 'TestUnpackExp4'
TT=90 runt all all models/all 'TestStreamExp4|TestBatchHostFree'
cat "$out/tests.txt" | tee -a "$out/summary.txt"
grep -h 'exp4:' "$out/test-kern.log" | tee -a "$out/summary.txt"
grep -h -B2 -A12 -- '--- FAIL' "$out"/test-*.log | head -40
log figures
for c in none exp4; do
  timeout 90 $b run-model --model $m --device cuda:0 --gpu-budget 0 --stream-codec $c \
    --token-ids 37,235,396,72,255,393,203,133,335,448,144,129 --ignore-eos --max-new-tokens 32 >"$out/rm-$c.txt" 2>&1
  echo "run-model budget 0 $c: $(grep -o 'generated: .*' "$out/rm-$c.txt" | md5sum | cut -c1-12) $(tail -1 "$out/rm-$c.txt")" | tee -a "$out/summary.txt"
done
BT=120 one g0-none NOOP=1 -- --model $m --budgets 0,8GiB --mode decode --iters 6
BT=120 one g0-exp4 NOOP=1 -- --model $m --budgets 0,8GiB --mode decode --iters 6 --stream-codec exp4
HB=0,8GiB HI=10 HX="--stream-codec exp4" hyb x1 NOOP=1
HB=0 HI=10 hyb n1 NOOP=1
HB=0,8GiB HI=10 HX="--stream-codec exp4" hyb x2 NOOP=1
HB=0 HI=10 HX="--stream-codec exp4" LEFT=500 hyb x3 NOOP=1
BT=90 one pf512-exp4 NOOP=1 -- --model $m --budgets 0 --mode prefill --tokens 512 --iters 3 --stream-codec exp4
for f in "$out"/hyb-*.txt "$out"/g0-*.txt "$out"/pf512-*.txt; do grep -E '^(0|8GiB)|timed forwards|pack: wall' "$f" | cut -c1-220 | sed "s/^/$(basename $f .txt): /"; done >>"$out/summary.txt"
finish
