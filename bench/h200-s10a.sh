#!/usr/bin/env bash
# Session 10, call a (about 8 minutes): llama.cpp as the peer of issues 20 and
# 21 (../shared/peers/peer_llamacpp.sh, unmodified, carried in .peer/ with its
# source archive and the Llama 3 tokenizer), on the same random weights as
# /tmp/llama3-8b; then our resident run-model baseline and session 9's
# untested GPU test (TestCUDASched).
# Usage (repo root, GPU machine, carry .devtools and .peer): bash bench/h200-s10a.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=560
nproc >"$out/nproc.txt"; grep -m1 'model name' /proc/cpuinfo >>"$out/nproc.txt"
# The peer makes /tmp/m with INFER make-model when it is missing; this stand-in
# waits for our make_models and links /tmp/m to the same weights instead.
cat >/tmp/infer-wait <<'W'
#!/usr/bin/env bash
for i in $(seq 600); do [ -f /tmp/llama3-8b.done ] && break; sleep 1; done
rm -rf /tmp/m; ln -s /tmp/llama3-8b /tmp/m
W
chmod +x /tmp/infer-wait
build_cuda
log peer-start
(bash .peer/peer_llamacpp.sh "$PWD/.peer/llamacpp.tar.xz" "$PWD/.peer/tok" /tmp/infer-wait "$out/peer" >"$out/peer.log" 2>&1; log peer-done) &
compile_tests runtime/cuda
MT=240 make_models; touch /tmp/llama3-8b.done
wait
log tests
runt sched cuda runtime/cuda '^TestCUDASched$'
cat "$out/tests.txt" >>"$out/summary.txt"
export FT_KERNEL_CACHE=$PWD/bin/kernels
log run-model
rmodel bf16-512 NOOP=1 -- --max-new-tokens 256
rmodel bf16-512-b NOOP=1 -- --max-new-tokens 256
grep -h '^|' "$out"/peer/llamacpp-*.md >>"$out/summary.txt" 2>/dev/null
finish
