#!/usr/bin/env bash
# Session 25, call a (about 8 minutes on a fresh machine): the tensor-core
# FP8 GEMVs (kernels/cuda/fp8gemvmma.cu, FT_FP8_VARIANT=mma and mmae)
# against the CPU reference (every variant, both scale layouts), the FP8
# fixtures through them, their standalone rates at Llama-3-8B's decode
# shapes beside the scalar variants (TestFP8GEMVRate), and the resident FP8
# decode step at 512 (issue 18) with each, interleaved.
# Usage (repo root, GPU machine): bash bench/h200-s25a.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=540
f8=/tmp/llama3-8b-fp8
start_call kernels/cudabackend models/all
(timeout 240 $b make-model --shape llama3-8b --dtype fp8-channel --out $f8 >"$out/make-model-fp8.txt" 2>&1) &
log tests
TT=150 runt fp8 cudabackend kernels/cudabackend 'TestFP8GEMVv|TestMatMulNFP8|TestGateUpSiLUFP8|TestFP8MMATakes'
if grep -q -i "nvrtc\|compile" "$out/test-fp8.log" && ! grep -q -- '--- PASS' "$out/test-fp8.log"; then
  tail -40 "$out/test-fp8.log" >>"$out/summary.txt"; finish; exit 0
fi
TT=120 runt rate cudabackend kernels/cudabackend 'TestFP8GEMVRate'
grep -E "rate (qkv|o|down|gateup) " "$out/test-rate.log" | sed 's/^ *//' >>"$out/summary.txt"
for v in mma mmae; do
  FT_FP8_VARIANT=$v TT=150 runt models-$v all models/all 'TestFP8Checkpoints|TestFP8FusedDecode|TestStreamDTypeFP8|TestFP8AddDecodeGPU'
done
tests_done
wait
log figures
R="--budgets resident --mode decode --context 512 --iters 20"
for r in a b; do for v in auto mma mmae; do one f8-$v-$r FT_FP8_VARIANT=$v -- --model $f8 $R; done; done
one f8-mma-prof FT_FP8_VARIANT=mma -- --model $f8 $R --kernel-profile
grep -E "gemv|attn_|rmsnorm|rope|launches" "$out/f8-mma-prof.txt" | head -24 >>"$out/summary.txt"
finish
