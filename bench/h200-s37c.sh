#!/usr/bin/env bash
# Session 37, call c: the q/k/v GEMM with only its TMA-store epilogue
# (FT_QKV_GEMM=1 now runs gemm_qkv_rope_tma_bf16; the register-store form
# removed): its kernel and model tests; then issue 15's 64 × 512 packed
# step with 6 timed steps each (bench prints every step now), default,
# FT_QKV_GEMM=1, default, while nvidia-smi samples the SM clock, power and
# throttle reasons every 200 ms (smi.txt), and prefill 8,192.
# Usage (repo root, GPU machine): bash bench/h200-s37c.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=540
start_call kernels/cudabackend models/all
log tests
TT=150 runt fused cudabackend kernels/cudabackend 'TestGateUpSiLUFusedGPU|TestProjectRoPEStoreRowsGPU'
FT_QKV_GEMM=1 TT=150 runt model all models/all 'TestFusedGEMMsModelGPU'
tests_done
log issue15
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 200 >"$out/smi.txt" 2>&1 &
smi=$!
P="--model $m --budgets resident --mode prefill --warmup 1"
BT=100 one pk64-def-a NOOP=1 -- $P --batch 64 --tokens 512 --iters 6
BT=100 one pk64-qkv FT_QKV_GEMM=1 -- $P --batch 64 --tokens 512 --iters 6
BT=100 one pk64-def-b NOOP=1 -- $P --batch 64 --tokens 512 --iters 6
BT=60 one pf8k-def NOOP=1 -- $P --tokens 8192 --iters 3
kill $smi
grep -h 'steps ms' "$out"/pk64-*.txt >>"$out/summary.txt"
awk -F', ' 'NR>1 {print $2, $6}' "$out/smi.txt" | sort | uniq -c | sort -rn | head -12 >>"$out/summary.txt"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv >>"$out/summary.txt" 2>&1
finish
