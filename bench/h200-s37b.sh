#!/usr/bin/env bash
# Session 37, call b: the gate/up GEMM storing by TMA as the default (s37a:
# 64 × 512 709.95, 711.68 ms against 724.50, 725.16 from registers), and
# the q/k/v GEMM with RoPE and the cache store storing through shared
# memory and TMA (FT_QKV_GEMM=tma, gemm_qkv_rope_tma_bf16). Its kernel test
# (the register stores' bits, nothing else written), the model test with
# it, then issue 15's 64 × 512 packed step and prefill 8,192 with and
# without it, interleaved, and one step of it under the kernel profile.
# Usage (repo root, GPU machine): bash bench/h200-s37b.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=540
start_call kernels/cudabackend models/all
log tests
TT=150 runt fused cudabackend kernels/cudabackend 'TestGateUpSiLUFusedGPU|TestProjectRoPEStoreRowsGPU|TestDependentLaunchMatchesSources'
export FT_QKV_GEMM=tma
TT=150 runt model all models/all 'TestFusedGEMMsModelGPU'
unset FT_QKV_GEMM
tests_done
log issue15
P="--model $m --budgets resident --mode prefill --warmup 1"
for r in a b; do
  BT=100 one pk64-def-$r NOOP=1 -- $P --batch 64 --tokens 512 --iters 3
  BT=100 one pk64-qkv-$r FT_QKV_GEMM=tma -- $P --batch 64 --tokens 512 --iters 3
done
for r in a b; do
  BT=60 one pf8k-def-$r NOOP=1 -- $P --tokens 8192 --iters 3
  BT=60 one pf8k-qkv-$r FT_QKV_GEMM=tma -- $P --tokens 8192 --iters 3
done
BT=100 one pk64-qkv-prof FT_QKV_GEMM=tma -- $P --batch 64 --tokens 512 --iters 1 --kernel-profile
grep -E 'gemm_|attn_|rope|norm|silu|Kernel|total' "$out/pk64-qkv-prof.txt" | head -30 >>"$out/summary.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu --format=csv >>"$out/summary.txt" 2>&1
finish
