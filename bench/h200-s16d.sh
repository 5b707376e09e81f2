#!/usr/bin/env bash
# Session 16, call d (about 6 minutes): issue 21's figures with the s16
# defaults next to llama.cpp in one call. llama.cpp (the 2025-02-20 snapshot
# as a source archive, carried in .peer/ with the Llama 3 tokenizer) is built
# and its resident llama-bench run as ../shared/peers/peer_llamacpp.sh's
# -ngl 99 step does, on the same weights (/tmp/llama3-8b converted to GGUF
# bf16); its -ngl 13 and -ngl 0 steps are left out for time. Ours: run-model
# 256 greedy tokens after 12 ids (two runs) and after 8,192 ids, and the
# per-kernel table of one decode step at context 512.
# Usage (repo root, GPU machine, carry .devtools and .peer): bash bench/h200-s16d.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=470
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
build_cuda
MT=240 make_models
export FT_KERNEL_CACHE=$PWD/bin/kernels
cp $P/tok/tokenizer.json $P/tok/tokenizer_config.json $m/
wait $pb
log convert
(cd /tmp/lc && PYTHONPATH=/tmp/lc/gguf-py timeout 200 python3 convert_hf_to_gguf.py $m --outtype bf16 --outfile /tmp/m.gguf >"$out/peer-convert.log" 2>&1; log converted) &
cv=$!
log figures
R="-- --max-new-tokens 256"
rmodel d1 NOOP=1 $R
rmodel d2 NOOP=1 $R
long=$(seq -s, 100 8291)
timeout 60 $b run-model --model $m --device cuda:0 --token-ids $long --ignore-eos --max-new-tokens 256 >"$out/rm-8k.txt" 2>&1
tail -1 "$out/rm-8k.txt" | sed "s/^/run-model 8k: /" | tee -a "$out/summary.txt"
BT=60 one kprof-512 NOOP=1 -- --model $m --budgets resident --mode decode --iters 10 --context 512 --kernel-profile
wait $cv
log peer-bench
(cd /tmp/lc/build/bin && LD_LIBRARY_PATH=$PWD:${LD_LIBRARY_PATH:-} timeout 120 ./llama-bench -m /tmp/m.gguf -ngl 99 -p 512,2048 -n 128 -fa 1 -r 3 -o md >"$out/llamacpp-ngl99.md" 2>"$out/peer-bench.log")
grep '^|' "$out/llamacpp-ngl99.md" | tee -a "$out/summary.txt"
finish
