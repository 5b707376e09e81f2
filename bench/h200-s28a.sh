#!/usr/bin/env bash
# Session 28, call a (written in session 27 after its device time ran
# out): the tests of what session 27 landed without a GPU run, then the
# FP8 GEMV rates. (1) kernels/cudabackend: every FP8 kernel test runs
# every variant, the persistent mp2/mp4 (fp8gemvmma.cu's fm_persist)
# included, against the CPU reference; TestFP8PersistBitIdentical against
# mm2/mm4 bit for bit; TestRoPEStoreKVPrefetch (rope_store_pf_bf16: the
# KV prefetch and the L2 hint, the same bits); TestEmbedding (the row over
# several blocks, on the default path); the argmax and the captured step.
# models/all: the default path's GPU, golden and batch tests (the
# embedding gather and rope_store_bf16 changed), and the FP8 tests with
# FT_FP8_PERSIST=all. (2) TestFP8GEMVRate (s25e: gate·up mm2 31.23 µs).
# The figures come in call b (bench/h200-s28b.sh), issued within 30 s so
# that it finds this machine warm.
# Usage (repo root, GPU machine): bash bench/h200-s28a.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=540
start_call kernels/cudabackend models/all
make_fp8
log tests
TT=150 runt fp8 cudabackend kernels/cudabackend 'Persist|TestFP8GEMVv|TestMatMulNFP8|TestGateUpSiLUFP8|TestNormMatMulNFP8|TestNormGateUpSiLUFP8|Argmax|RoPEStoreKV|TestCapturedStep|TestEmbedding'
TT=150 runt models all models/all 'GPU|TestGolden|TestBatch'
FT_FP8_PERSIST=all TT=120 runt models-mp all models/all 'FP8'
TT=100 runt rate cudabackend kernels/cudabackend 'TestFP8GEMVRate'
grep -E "rate (qkv|o|down|gateup) +(bf16pipe|auto|mm|mp)" "$out/test-rate.log" | sed 's/^ *fp8gemvrate_test.go:[0-9]*: //' >>"$out/summary.txt"
tests_done
finish
