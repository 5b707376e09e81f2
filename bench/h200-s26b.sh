#!/usr/bin/env bash
# Session 26, call b (about 3 minutes on a fresh machine): what each kernel
# class costs inside the replayed resident FP8 decode step at 512
# (FT_SKIP_KERNELS drops the launches of the named kernel-name prefixes:
# results wrong, times right), the FP8 twin of s6b's BF16 table.
# Usage (repo root, GPU machine): bash bench/h200-s26b.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=400
start_call
make_fp8
log figures
R="--budgets resident --mode decode --context 512 --iters 20"
one base-a -- --model $f8 $R
for s in attn_ rmsnorm rope_ attn_,rmsnorm,rope_ gemv3_fp8 gemv_fp8_v gemv_gateup_silu_fp8 gemv_persist_pipe_early_f32out embedding gemv3_fp8,gemv_fp8_v,gemv_gateup_silu_fp8; do
  one skip-$s FT_SKIP_KERNELS=$s -- --model $f8 $R
done
one base-b -- --model $f8 $R
one kprof -- --model $f8 $R --kernel-profile
grep -E '^(gemv|attn|rms|rope|emb)' "$out/kprof.txt" | head -20 >>"$out/summary.txt"
finish
