#!/usr/bin/env bash
# Session 10, call c (about 8 minutes): issue 20's figures with the session's
# defaults (block rates, the embedding table on the host, copies measured
# beside host units), repeated; A/B of FT_HOST_COPY_MEASURE, FT_HOST_PREFETCH
# and four transfer slots at budget 0; prefill 512 at 8 GiB + host; run-model
# at 8 GiB + host.
# Usage (repo root, GPU machine): bash bench/h200-s10c.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=480
build_cuda
compile_tests offload
MT=240 make_models
wait
export FT_KERNEL_CACHE=$PWD/bin/kernels
log tests
TT=90 runt oer offload offload '^TestOffloadedEqualsResident$|^TestGPUEmbedHost$'
cat "$out/tests.txt" >>"$out/summary.txt"
sync; echo 3 >/proc/sys/vm/drop_caches
HI=8 hyb new NOOP=1
HI=8 hyb nocopy FT_HOST_COPY_MEASURE=0
HI=8 hyb pf1024 FT_HOST_PREFETCH=1024
HI=8 HB=0 HX="--transfer-blocks 4" hyb slots4 NOOP=1
HI=8 hyb new-b NOOP=1
HI=8 LEFT=380 hyb pf1024-b FT_HOST_PREFETCH=1024
HI=8 LEFT=400 HB=0 HX="--transfer-blocks 4" hyb slots4-b NOOP=1
left 420 && { log prefill; env FT_TRACE=1 timeout 60 $b bench --device cuda:0 --model $m --budgets 8GiB --mode prefill --tokens 512 --iters 2 --host-threads 16 >"$out/prefill-host.txt" 2>&1
  grep -E '^8GiB' "$out/prefill-host.txt" | sed 's/^/prefill 512: /' | tee -a "$out/summary.txt"; }
RT=60 rmodel hyb8 NOOP=1 -- --max-new-tokens 48 --gpu-budget 8GiB --host-threads 16
finish
