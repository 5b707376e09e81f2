#!/usr/bin/env bash
# Session 18, call b (about 6 minutes): s18a again after the fix (the fused kernel loaded its 16 RoPE frequencies one after another before the wait, 19.4 µs a launch against 10.9):: the q/k norms, RoPE and KV store
# inside the decode attention (attn_decode_pipe_d128_s3w4h1tpn_bf16,
# FT_QKNORM_ATTN; issue 21's Qwen3-8B figure). Its GPU tests first, then
# run-model on Qwen3-8B, 256 greedy tokens after the 12 fixed ids, fused
# (default) and FT_QKNORM_ATTN=0 interleaved (the generated ids compared),
# once after 8,192 ids each, Llama-3-8B once (a path the change leaves
# alone), and the per-kernel table of one Qwen3 decode step at 512.
# Usage (repo root, GPU machine): bash bench/h200-s18b.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=540
compile_tests kernels/cudabackend models/all
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
q3=/tmp/qwen3-8b
(timeout 240 $b make-model --shape qwen3-8b --out $q3 >"$out/make-model-q3.txt" 2>&1) &
(MT=240 make_models) &
wait
log tests
TT=150 runt kern cudabackend kernels/cudabackend 'TestNormRoPEAttendGPU|TestNormRoPEStoreKVGPU|TestCapturedStep|TestDecodePipe' &
TT=150 runt all all models/all 'GPU$|TestFusedDecodeSwitchesGPU' &
wait
cat "$out/tests.txt" | tee -a "$out/summary.txt"
grep -h -B2 -A20 -- '--- FAIL' "$out"/test-*.log | head -60
log figures
R="-- --max-new-tokens 256"
m=$q3 rmodel q1 NOOP=1 $R
m=$q3 rmodel o1 FT_QKNORM_ATTN=0 $R
m=$q3 rmodel q2 NOOP=1 $R
m=$q3 rmodel o2 FT_QKNORM_ATTN=0 $R
m=$q3 rmodel q3 NOOP=1 $R
rmodel d1 NOOP=1 $R
for p in q1 o1 q2; do head -n -1 "$out/rm-$p.txt" | md5sum | sed "s/^/ids $p: /" | tee -a "$out/summary.txt"; done
long=$(seq -s, 100 8291)
for e in q:NOOP=1 o:FT_QKNORM_ATTN=0; do
  left 450 || break
  env ${e#*:} timeout 60 $b run-model --model $q3 --device cuda:0 --token-ids $long --ignore-eos --max-new-tokens 256 >"$out/rm-8k-${e%%:*}.txt" 2>&1
  tail -1 "$out/rm-8k-${e%%:*}.txt" | sed "s/^/run-model 8k ${e%%:*}: /" | tee -a "$out/summary.txt"
done
BT=60 one kprof-q3 NOOP=1 -- --model $q3 --budgets resident --mode decode --iters 10 --context 512 --kernel-profile
BT=60 one kprof-q3-off FT_QKNORM_ATTN=0 -- --model $q3 --budgets resident --mode decode --iters 10 --context 512 --kernel-profile
finish
