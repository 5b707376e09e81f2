#!/usr/bin/env bash
# After the 2026-12-01 third-session merges (pipelined decode attention,
# 128-row prefill attention, programmatic dependent launch, residual
# accumulation, FP8 GEMVs, cuBLASLt FP8 GEMM): the figures each change aims
# at, with its A/B switch. Usage (repo root, GPU machine):
#   bench/h200-round2.sh OUTDIR [tests]   ("tests": make test-cuda first)
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
log() { echo "== $(date +%T) $*" | tee -a "$out/steps.log"; }
b=bin/infer-cuda; m=/tmp/llama3-8b; ids=37,235,396,72,255,393,203,133,335,448,144,129
log build; timeout 150 make build-cuda >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
git rev-parse --short HEAD >"$out/commit.txt" 2>/dev/null
if [ "${2:-}" = tests ]; then
  log tests; timeout 480 make -s test-cuda >"$out/tests.log" 2>&1; echo "test-cuda rc=$?" | tee -a "$out/steps.log"
  grep -E '^(--- FAIL|FAIL|ok|panic)' "$out/tests.log" | head -40; grep -A15 -- '--- FAIL' "$out/tests.log" | head -80
  exit 0
fi
row() { echo "$1: $(grep -E "$2" "$3" | awk '{printf "%s %s ms; ", $1, $3}') $(grep -E '^resident' "$3" | awk '{print "meas", $(NF-2)}') $(grep replayed "$3" | sed 's/.*device: /graph /')"; }
log make-model; [ -d $m ] || timeout 120 $b make-model --shape llama3-8b --out $m >"$out/make-model.txt" 2>&1
sed -i 's/"max_position_embeddings": 8192/"max_position_embeddings": 40960/' $m/config.json
for v in "" 0; do
  FT_PDL=$v timeout 60 $b bench --model $m --device cuda:0 --budgets resident --mode decode --context 512 --iters 20 --kernel-profile >"$out/decode512-pdl$v.txt" 2>&1
  row "decode 512 FT_PDL=$v" 'gemv|attn|norm|add_f32' "$out/decode512-pdl$v.txt"
  [ -z "$v" ] && for i in 1 2; do FT_PDL=$v timeout 60 $b run-model --model $m --device cuda:0 --token-ids $ids --max-new-tokens 256 --ignore-eos 2>&1 | tail -1; done | tee "$out/run-model-pdl$v.txt"
done
for c in 8192 32000; do timeout 60 $b bench --model $m --device cuda:0 --budgets resident --mode decode --context $c --iters 10 --warmup 2 --kernel-profile >"$out/decode$c.txt" 2>&1; row "decode $c" 'attn' "$out/decode$c.txt"; done
timeout 90 $b bench --model $m --device cuda:0 --budgets resident --mode prefill --tokens 8192 --iters 3 --warmup 1 --kernel-profile >"$out/prefill8k.txt" 2>&1; row "prefill 8192" 'attn|add|rmsnorm|rope' "$out/prefill8k.txt"
timeout 60 $b bench --model $m --device cuda:0 --budgets resident --mode prefill --tokens 2048 --iters 3 --warmup 1 >"$out/prefill2k.txt" 2>&1; row "prefill 2048 bf16" 'x^' "$out/prefill2k.txt"
timeout 90 $b bench --model $m --device cuda:0 --budgets resident --batch 64,256 --context 512 --iters 5 --warmup 2 >"$out/batch.txt" 2>&1; grep -E '^resident' "$out/batch.txt"
log hybrid; timeout 150 $b bench --model $m --device cuda:0 --budgets 0,8GiB --mode decode --context 512 --iters 5 --warmup 6 --host-threads 16 >"$out/hybrid.txt" 2>&1; tail -4 "$out/hybrid.txt"
timeout 40 $b bench-host --threads 16 --kinds bf16 --tokens 1 >"$out/bench-host.txt" 2>&1; tail -8 "$out/bench-host.txt"
rm -rf $m; m=/tmp/llama3-8b-fp8
log make-fp8; timeout 150 $b make-model --shape llama3-8b --dtype fp8-channel --out $m >"$out/make-fp8.txt" 2>&1
for v in "" legacy; do
  FT_FP8_GEMV=$v timeout 60 $b bench --model $m --device cuda:0 --budgets resident --mode decode --context 512 --iters 20 --kernel-profile >"$out/fp8-decode-$v.txt" 2>&1; row "fp8 decode FT_FP8_GEMV=$v" 'fp8|attn' "$out/fp8-decode-$v.txt"
done
for v in lt lt-fast dequant; do
  FT_FP8_GEMM=$v FT_TRACE=1 timeout 60 $b bench --model $m --device cuda:0 --budgets resident --mode prefill --tokens 2048 --iters 3 --warmup 1 --kernel-profile >"$out/fp8-prefill-$v.txt" 2>&1; row "fp8 prefill 2048 FT_FP8_GEMM=$v" 'fp8|quant|cublasLt|dequant' "$out/fp8-prefill-$v.txt"; grep -i "falls back\|cublasLt" "$out/fp8-prefill-$v.txt" | grep -v '^cublasLt' | head -3
done
log done
