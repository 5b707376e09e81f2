#!/usr/bin/env bash
# Session 18, call c (about 8 minutes): the fused q/k norm attention with
# the new row written straight into the writer warp's ring stage (s18b:
# 4.22 against 4.12 ms a Qwen3-8B token when the copy of that row waited
# on the kernel's own store), and issue 21's closing figures next to
# llama.cpp in the same call. llama.cpp (the 2025-02-20 snapshot as a
# source archive, carried in .peer/ with the Llama 3 tokenizer) is built in
# the background and run as ../shared/peers/peer_llamacpp.sh's -ngl 99
# step on the same Llama weights (/tmp/llama3-8b converted to GGUF bf16).
# Ours: the fused kernel's GPU tests; run-model Qwen3-8B fused and
# FT_QKNORM_ATTN=0 interleaved (after 12 and after 8,192 ids); Llama-3-8B
# run-model after 12 ids (two runs) and 8,192 ids; the per-kernel tables of
# one decode step at 512 of both shapes.
# Usage (repo root, GPU machine, carry .devtools and .peer): bash bench/h200-s18c.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=560
P=$PWD/.peer
peer_build() {
  rm -rf /tmp/lc && mkdir -p /tmp/lc && tar xJf "$P/llamacpp.tar.xz" -C /tmp/lc && cd /tmp/lc
  mkdir -p tests pocs && touch tests/CMakeLists.txt pocs/CMakeLists.txt
  cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DCMAKE_BUILD_TYPE=Release >"$out/peer-cfg.log" 2>&1 || return 1
  cmake --build build --target llama-bench -j16 >"$out/peer-build.log" 2>&1
}
log start
(peer_build; echo "peer build rc=$?" >>"$out/summary.txt"; log peer-built) &
pb=$!
compile_tests kernels/cudabackend models/all
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
q3=/tmp/qwen3-8b
(timeout 240 $b make-model --shape qwen3-8b --out $q3 >"$out/make-model-q3.txt" 2>&1) &
(MT=240 make_models) &
wait $(jobs -p | grep -v "^$pb$")
log tests
TT=150 runt kern cudabackend kernels/cudabackend 'TestNormRoPEAttendGPU|TestNormRoPEStoreKVGPU|TestCapturedStep' &
TT=150 runt all all models/all 'GPU$|TestFusedDecodeSwitchesGPU' &
wait $(jobs -p | grep -v "^$pb$")
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
rmodel d2 NOOP=1 $R
for p in q1 o1 q2; do head -n -1 "$out/rm-$p.txt" | md5sum | sed "s/^/ids $p: /" | tee -a "$out/summary.txt"; done
long=$(seq -s, 100 8291)
for e in d:NOOP=1:$m q:NOOP=1:$q3 o:FT_QKNORM_ATTN=0:$q3; do
  IFS=: read -r tag ev mm <<<"$e"
  env $ev timeout 60 $b run-model --model $mm --device cuda:0 --token-ids $long --ignore-eos --max-new-tokens 256 >"$out/rm-8k-$tag.txt" 2>&1
  tail -1 "$out/rm-8k-$tag.txt" | sed "s/^/run-model 8k $tag: /" | tee -a "$out/summary.txt"
done
BT=60 one kprof-q3 NOOP=1 -- --model $q3 --budgets resident --mode decode --iters 10 --context 512 --kernel-profile
BT=60 one kprof-llama NOOP=1 -- --model $m --budgets resident --mode decode --iters 10 --context 512 --kernel-profile
cp $P/tok/tokenizer.json $P/tok/tokenizer_config.json $m/
log wait-peer
wait $pb
log convert
(cd /tmp/lc && PYTHONPATH=/tmp/lc/gguf-py timeout 200 python3 convert_hf_to_gguf.py $m --outtype bf16 --outfile /tmp/m.gguf >"$out/peer-convert.log" 2>&1)
log peer-bench
(cd /tmp/lc/build/bin && LD_LIBRARY_PATH=$PWD:${LD_LIBRARY_PATH:-} timeout 120 ./llama-bench -m /tmp/m.gguf -ngl 99 -p 512,2048 -n 128 -fa 1 -r 3 -o md >"$out/llamacpp-ngl99.md" 2>"$out/peer-bench.log")
grep '^|' "$out/llamacpp-ngl99.md" | tee -a "$out/summary.txt"
finish
