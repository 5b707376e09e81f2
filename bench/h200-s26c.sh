#!/usr/bin/env bash
# Session 26, call c (about 6 minutes on a fresh machine): the RMSNorms
# folded into the FP8 tensor-core q/k/v and gate·up GEMVs
# (FT_FP8_FUSE_NORM, on by default here): go vet -tags cuda, the kernels
# against the CPU reference (every variant; the decline cases), the models'
# FP8 decode tests (folded against not; the FP8 add test), and the resident
# FP8 decode step at 512 with and without the folding, interleaved, plus a
# kernel profile of the folded step.
# Usage (repo root, GPU machine): bash bench/h200-s26c.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=450
(test_env; timeout 200 go vet -tags cuda ./kernels/cudabackend/ ./models/all/ >"$out/vet.log" 2>&1; echo "vet rc=$?" >>"$out/summary.txt") &
start_call kernels/cudabackend models/all
make_fp8
log tests
TT=150 runt fp8 cudabackend kernels/cudabackend 'TestNormMatMulNFP8|TestNormGateUpSiLUFP8|TestMatMulNFP8|TestGateUpSiLUFP8|TestCapturedStep'
TT=150 runt models all models/all 'FP8'
tests_done || { finish; exit 0; }
log figures
R="--budgets resident --mode decode --context 512 --iters 20"
for r in a b c; do for e in 1 0; do
  one f8-fold$e-$r FT_FP8_FUSE_NORM=$e -- --model $f8 $R
done; done
one kprof -- --model $f8 $R --kernel-profile
grep -E '^(gemv|attn|rms|rope|emb)' "$out/kprof.txt" | head -20 >>"$out/summary.txt"
finish
