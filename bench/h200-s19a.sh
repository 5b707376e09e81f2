#!/usr/bin/env bash
# Session 19, call a (about 9 minutes): issue 20's figures in one call with
# llama.cpp on the same weights. llama.cpp (the 2025-02-20 snapshot, carried
# in .peer/ with the Llama 3 tokenizer) builds in the background while ours
# builds; our host runs wait for it (they need the 16 cores to themselves).
# Ours: the host kernels' STREAM-like read and GEMV rates (bench-host);
# budget 0 and 8 GiB decode, two-way and three-way (three processes);
# prefill 512 at both budgets with --host-threads (the planner should
# stream); batched decode of 64 at 8 GiB, two-way and +host (batched
# forwards now run a host-free plan). Then llama.cpp -ngl 13 and -ngl 0
# (../shared/peers/peer_llamacpp.sh's steps), then budget 0 + host twice
# more. The host-placement GPU tests run first.
# Usage (repo root, GPU machine, carry .devtools and .peer): bash bench/h200-s19a.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=570
P=$PWD/.peer
log start
peer_build &
pb=$!
compile_tests models/all
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
MT=240 make_models
wait $(jobs -p | grep -v "^$pb$")
log tests
TT=90 runt all all models/all 'TestHostPlacementDevice|TestBatchEveryDevice|TestBatchHostFree'
cat "$out/tests.txt" | tee -a "$out/summary.txt"
grep -h -B2 -A12 -- '--- FAIL' "$out"/test-*.log | head -40
log wait-peer
wait $pb
log host-kernels
timeout 60 $b bench-host --threads 16 --kinds bf16 --tokens 1 >"$out/bench-host.txt" 2>&1
grep -iE 'read|GB/s' "$out/bench-host.txt" | head -12 | tee -a "$out/summary.txt"
HB=0,8GiB HI=10 hyb a1 NOOP=1
HB=0,8GiB HI=10 hyb a2 NOOP=1
HB=0 HI=10 hyb a3 NOOP=1
log prefill-batch
BT=90 one pf512 NOOP=1 -- --model $m --budgets 0,8GiB --mode prefill --tokens 512 --iters 3 --host-threads 16
grep -E '^(0|8GiB)' "$out/pf512.txt" | sed 's/^/pf512 row: /' | tee -a "$out/summary.txt"
timeout 120 $b bench --device cuda:0 --model $m --budgets 8GiB --batch 64 --context 512 --iters 5 --host-threads 16 >"$out/batch64.txt" 2>&1
grep -E '^(8GiB|budget)' "$out/batch64.txt" | sed 's/^/batch64: /' | tee -a "$out/summary.txt"
cp $P/tok/tokenizer.json $P/tok/tokenizer_config.json $m/
log convert
(cd /tmp/lc && PYTHONPATH=/tmp/lc/gguf-py timeout 200 python3 convert_hf_to_gguf.py $m --outtype bf16 --outfile /tmp/m.gguf >"$out/peer-convert.log" 2>&1)
log peer-bench
(cd /tmp/lc/build/bin && export LD_LIBRARY_PATH=$PWD:${LD_LIBRARY_PATH:-} &&
  timeout 90 ./llama-bench -m /tmp/m.gguf -ngl 13 -p 512 -n 32 -fa 1 -r 2 -o md >"$out/llamacpp-ngl13.md" 2>"$out/peer-bench13.log";
  timeout 90 ./llama-bench -m /tmp/m.gguf -ngl 0 -p 512 -n 16 -fa 1 -r 1 -o md >"$out/llamacpp-ngl0.md" 2>"$out/peer-bench0.log")
grep -h '^|' "$out"/llamacpp-ngl*.md | tee -a "$out/summary.txt"
HB=0 HI=10 LEFT=540 hyb b1 NOOP=1
HB=0 HI=10 LEFT=555 hyb b2 NOOP=1
for f in "$out"/hyb-*.txt; do grep -E '^(0|8GiB)|timed forwards' "$f" | cut -c1-200 | sed "s/^/$(basename $f .txt): /"; done >>"$out/summary.txt"
finish
