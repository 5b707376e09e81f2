#!/usr/bin/env bash
# FT_VARLEN_CONTIG A/B (issue 15's 64 × 512 packed prefill; branch
# h2-varlen, not yet run): the GPU tests of the packed prefill attention,
# then the 64 × 512 packed prefill with the switch off and on, interleaved,
# with kernel profiles (attention's row: attn_varlen_prefill_wg3_d128_bf16
# off, attn_varlen_contig_prefill_wg3_d128_bf16 on), and prefill 8,192
# (one sequence, untouched by the switch) as a control.
# Usage (repo root, GPU machine): bash bench/h200-varlen-contig.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=540
compile_tests kernels/cudabackend models/all
build_cuda
wait
make_models
export FT_KERNEL_CACHE=$PWD/bin/kernels
log tests
TT=150 runt kern cudabackend kernels/cudabackend 'TestVarlenContig|TestVarlenPrefillKernels|TestPrefillWG3Quick|TestCheckEnvSwitch'
TT=150 runt model all models/all 'TestVarlenContig|TestBatchEveryDevice'
(export FT_VARLEN_CONTIG=1; TT=150 runt model-on all models/all 'TestBatchEveryDevice|TestVarlenContigBatchGPU')
cat "$out/tests.txt"
R="--budgets resident"
P="$R --model $m --batch 64 --mode prefill --tokens 512 --iters 3 --warmup 1"
one packed-off FT_VARLEN_CONTIG=0 -- $P
one packed-on FT_VARLEN_CONTIG=1 -- $P
one packed-off2 FT_VARLEN_CONTIG=0 -- $P
one packed-on2 FT_VARLEN_CONTIG=1 -- $P
one packed-off-kp FT_VARLEN_CONTIG=0 -- $P --kernel-profile
one packed-on-kp FT_VARLEN_CONTIG=1 -- $P --kernel-profile
one pre8k-off FT_VARLEN_CONTIG=0 -- $R --model $m --mode prefill --tokens 8192 --iters 2 --warmup 1
one pre8k-on FT_VARLEN_CONTIG=1 -- $R --model $m --mode prefill --tokens 8192 --iters 2 --warmup 1
cat "$out/tests.txt"
finish
