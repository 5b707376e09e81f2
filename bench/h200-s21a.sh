#!/usr/bin/env bash
# Session 21, call a (about 6 minutes): the GPU tests of what session 20
# left untested there (wg3's removal from the module, the GEMM tuner's
# reshaped sampling and TuneSustained), then the A/B of its two switches
# at prefill 8,192 and 64 x 512 packed, interleaved with the default
# (issue 15), and Nsight Compute's source view of wg6 at 8,192 (where the
# softmax's cycles go).
# Usage (repo root, GPU machine): bash bench/h200-s21a.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=420
compile_tests kernels/cudabackend
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
(MT=240 make_models) &
wait
git rev-parse --short HEAD >"$out/commit.txt" 2>/dev/null
log tests
TT=150 runt gpu cudabackend kernels/cudabackend 'TestPrefillWG6Quick|TestVarlenContigKernels|TestPrefillWGModule|TestPrefillAttentionKernels|TestVarlenPrefillKernels|TestTunedGEMM'
cat "$out/tests.txt" | tee -a "$out/summary.txt"
grep -h -B2 -A12 -- '--- FAIL' "$out"/test-*.log | head -40
log figures
P="--model $m --budgets resident --mode prefill --warmup 1"
one pf-def-kp X=1 -- $P --tokens 8192 --iters 1 --kernel-profile
one pf-qkv-kp FT_MERGED_GEMM=qkv -- $P --tokens 8192 --iters 1 --kernel-profile
for r in a b; do
  one pf-def-$r X=1 -- $P --tokens 8192 --iters 3
  one pf-sus-$r FT_GEMM=lt-sustained -- $P --tokens 8192 --iters 3
  one pf-qkv-$r FT_MERGED_GEMM=qkv -- $P --tokens 8192 --iters 3
done
one pk-def X=1 -- $P --batch 64 --tokens 512 --iters 2
one pk-sus FT_GEMM=lt-sustained -- $P --batch 64 --tokens 512 --iters 2
one pk-qkv FT_MERGED_GEMM=qkv -- $P --batch 64 --tokens 512 --iters 2
log ncu-src
timeout 150 ncu --clock-control none -k regex:attn_prefill_wg6 --launch-skip 40 --launch-count 1 --section SourceCounters \
  --section WarpStateStats --section ComputeWorkloadAnalysis --section InstructionStats --page details --page source \
  --print-source sass $b bench --device cuda:0 --budgets resident --model $m \
  --mode prefill --tokens 8192 --iters 1 --warmup 1 >"$out/ncu-wg6-sass.txt" 2>&1
gzip -k "$out/ncu-wg6-sass.txt"
finish
