#!/usr/bin/env bash
# Issue 18: sweep the tuning variants of the one-token FP8 GEMVs
# (kernels/cuda/fp8gemv.cu, picked by FT_FP8_VARIANT; names u<U>r<R><s|g>:
# U loads per lane and row in flight, R rows per warp, x as fp32 in shared
# memory (s) or bf16 from global memory (g)). Builds, runs the FP8 GEMV GPU
# tests over every variant (with the per-variant bandwidth report of
# TestFP8GEMVBandwidth), then a resident FP8 (per-channel) Llama-3-8B decode
# step at context 512 per variant: one line each with the three FP8
# kernels' ms (GB/s) from the kernel profile and the graph-replayed step.
# Usage (repo root, GPU machine): bench/h200-fp8sweep.sh OUTDIR
#   VARIANTS="u8r1g u8r1s" bench/h200-fp8sweep.sh OUTDIR   (a subset)
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
log() { echo "== $(date +%T) $*" | tee -a "$out/steps.log"; }
b=bin/infer-cuda; m=/tmp/llama3-8b-fp8
variants=${VARIANTS:-u8r1g u8r1s u4r1s u16r1s u8r2s u16r1g u8r2g}
log build; timeout 150 make build-cuda >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
git rev-parse --short HEAD >"$out/commit.txt" 2>/dev/null
log tests
GOFLAGS='-run=TestFP8GEMVv|TestMatMulNFP8|TestGateUpSiLUFP8|TestFP8GEMVBandwidth -v' \
  timeout 300 make -s test-cuda CUDA_PKGS='./kernels/cudabackend' >"$out/tests.log" 2>&1; echo "FP8 GEMV tests rc=$?" | tee -a "$out/steps.log"
grep -E '^(--- FAIL|FAIL|ok|panic)' "$out/tests.log" | head -20; grep -A6 -- '--- FAIL' "$out/tests.log" | head -40
grep 'GB/s of FP8' "$out/tests.log" | sed 's/^ *fp8gemv_test.go:[0-9]*: //' >"$out/bandwidth.txt"; cat "$out/bandwidth.txt"
log make-model; [ -d $m ] || timeout 150 $b make-model --shape llama3-8b --dtype fp8-channel --out $m >"$out/make-model.txt" 2>&1
# kern NAME FILE: "ms (GB/s)" of kernel NAME in a kernel profile
kern() { awk -v k="$1" '$1 == k {printf "%s ms (%s GB/s)", $3, $NF}' "$2"; }
for v in $variants; do
  f="$out/decode-$v.txt"
  FT_FP8_VARIANT=$v timeout 60 $b bench --model $m --device cuda:0 --budgets resident --mode decode --context 512 --iters 20 --kernel-profile >"$f" 2>&1
  echo "$v: down/o $(kern gemv_fp8_v_$v "$f"); gate-up $(kern gemv_gateup_silu_fp8_$v "$f"); qkv $(kern gemv3_fp8_$v "$f"); $(grep -E '^resident' "$f" | awk '{print "meas", $(NF-2), "ms"}'); graph $(grep replayed "$f" | sed 's/.*: //')" | tee -a "$out/sweep.txt"
done
log done
