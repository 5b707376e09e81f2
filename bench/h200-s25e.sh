#!/usr/bin/env bash
# Session 25, call e (about 5 minutes on a fresh machine): the second layout
# of the tensor-core FP8 GEMVs (mm2, mm2x, mm2l: k-steps of 128 columns,
# x staged per warp with no block barrier, two k-steps in flight, 8-row
# gate·up tiles) against the CPU reference, the FP8 fixtures through mm2,
# their standalone rates (TestFP8GEMVRate) and the resident FP8 decode
# step at 512 against the default, interleaved.
# Usage (repo root, GPU machine): bash bench/h200-s25e.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=540
f8=/tmp/llama3-8b-fp8
compile_tests kernels/cudabackend models/all
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
(timeout 240 $b make-model --shape llama3-8b --dtype fp8-channel --out $f8 >"$out/make-model-fp8.txt" 2>&1) &
wait
log tests
TT=150 runt fp8 cudabackend kernels/cudabackend 'TestFP8GEMVv|TestMatMulNFP8|TestGateUpSiLUFP8'
TT=120 runt rate cudabackend kernels/cudabackend 'TestFP8GEMVRate'
grep -E "rate (qkv|o|down|gateup) +(bf16pipe|auto|mm)" "$out/test-rate.log" | sed 's/^ *fp8gemvrate_test.go:[0-9]*: //' >>"$out/summary.txt"
FT_FP8_VARIANT=mm2 TT=150 runt models-mm2 all models/all 'TestFP8Checkpoints|TestFP8FusedDecode|TestStreamDTypeFP8|TestFP8AddDecodeGPU'
tests_done
log figures
R="--budgets resident --mode decode --context 512 --iters 20"
for r in a b; do for v in auto mm2 mm2x mm2l; do one f8-$v-$r FT_FP8_VARIANT=$v -- --model $f8 $R; done; done
finish
