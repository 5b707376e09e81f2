#!/usr/bin/env bash
# Session 26, call d (about 6 minutes on a fresh machine): the FP8 q/k/v
# GEMV with RoPE and the KV store in its epilogue (FT_FP8_FUSE_ROPE, on by
# default here; with the input norm folded in too): go vet -tags cuda,
# the fused kernel bit for bit against the separate ops and near the CPU
# reference, the folded-norm kernels again, the models' FP8 decode tests,
# and the resident FP8 decode step at 512 with and without the fusion,
# interleaved, plus a kernel profile.
# Usage (repo root, GPU machine): bash bench/h200-s26d.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=450
(test_env; timeout 200 go vet -tags cuda ./kernels/cudabackend/ ./models/all/ >"$out/vet.log" 2>&1; echo "vet rc=$?" >>"$out/summary.txt") &
start_call kernels/cudabackend models/all
make_fp8
log tests
TT=150 runt fp8 cudabackend kernels/cudabackend 'TestProjectRoPEStoreKVFP8GPU|TestNormMatMulNFP8|TestNormGateUpSiLUFP8|TestProjectRoPEStoreKVGPU|TestCapturedStep'
TT=150 runt models all models/all 'FP8'
tests_done || { finish; exit 0; }
log figures
R="--budgets resident --mode decode --context 512 --iters 20"
for r in a b c; do for e in 1 0; do
  one f8-rope$e-$r FT_FP8_FUSE_ROPE=$e -- --model $f8 $R
done; done
one kprof -- --model $f8 $R --kernel-profile
grep -E '^(gemv|attn|rms|rope|emb)' "$out/kprof.txt" | head -20 >>"$out/summary.txt"
finish
