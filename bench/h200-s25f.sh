#!/usr/bin/env bash
# Session 25, call f (about 6 minutes on a fresh machine): auto now picks
# the tensor-core mm2 for q/k/v, o and gate·up (p4s stays for down): every
# FP8 test of the backend and the models against it, the rates with mm4
# (four k-steps in flight), and the resident FP8 decode step at 512 with
# auto, mm2 and mm4 everywhere, interleaved.
# Usage (repo root, GPU machine): bash bench/h200-s25f.sh OUTDIR
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
TT=200 runt fp8 cudabackend kernels/cudabackend 'FP8|TestCapturedStep'
grep -E "rate (qkv|o|down|gateup) +(bf16pipe|auto|p4s|mm)" "$out/test-fp8.log" | sed 's/^ *fp8gemvrate_test.go:[0-9]*: //' >>"$out/summary.txt"
TT=240 runt models all models/all 'FP8|TestTrained|TestGolden'
tests_done
log figures
R="--budgets resident --mode decode --context 512 --iters 20"
for r in a b; do for v in auto mm2 mm4; do one f8-$v-$r FT_FP8_VARIANT=$v -- --model $f8 $R; done; done
finish
