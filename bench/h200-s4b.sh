#!/usr/bin/env bash
# The fourth 2026-12-01 session's closing GPU call (under 10 minutes): the
# GPU tests of everything merged this session, four test binaries side by
# side (decode attention; prefill attention; the backend's GEMV, GEMM, FP8
# and norm ops; whole models), then the session's figures with the
# defaults as committed, and the A/B runs that chose them. One line a run
# in summary.txt. Runs stop being started near the call's 9-minute mark.
# Usage (repo root, GPU machine): bench/h200-s4b.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"; t0=$(date +%s)
log() { echo "== $(date +%T) +$(( $(date +%s) - t0 ))s $*" | tee -a "$out/steps.log"; }
left() { [ $(( $(date +%s) - t0 )) -lt ${1:-530} ]; }
b=bin/infer-cuda; m=/tmp/llama3-8b; ids=37,235,396,72,255,393,203,133,335,448,144,129
log build; timeout 170 make build-cuda >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
mkdir -p /tmp/t; R=$PWD; C=/usr/local/cuda
export CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -I$R/runtime/cuda/compat -I$C/include" \
  CGO_LDFLAGS="-L$C/lib64 -L$C/lib64/stubs -Wl,--disable-new-dtags,-rpath,$C/lib64:/usr/local/nvidia/lib64" \
  LD_LIBRARY_PATH="$C/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}"
log compile-tests
for p in kernels/cudabackend models/all; do
  timeout 200 go test -tags cuda -c -o /tmp/t/$(basename $p).test ./$p >"$out/compile-$(basename $p).log" 2>&1 &
done; wait
timeout 120 $b make-model --shape llama3-8b --out $m >"$out/make-model.txt" 2>&1 &
log tests
runt() { # tag binary dir regex
  (cd $3 && timeout ${TT:-230} /tmp/t/$2.test -test.count=1 -test.v -test.run "$4" >"$out/test-$1.log" 2>&1); local rc=$?
  echo "test $1 rc=$rc: $(grep -cE '^\s*--- PASS' "$out/test-$1.log") passed, $(grep -cE '^\s*--- FAIL' "$out/test-$1.log") failed, last: $(grep -E '^=== RUN' "$out/test-$1.log" | tail -1)" >>"$out/tests.txt"
}
runt decode cudabackend kernels/cudabackend 'TestDecodeMMA|TestPagedDecodeMMA|TestDecodePipePositions|TestDecodePipeCapturedStep|TestCapturedStep' &
runt prefill cudabackend kernels/cudabackend 'TestPrefillAttentionKernels|TestVarlenPrefillKernels|TestPrefillVariantOccupancy' &
runt ops cudabackend kernels/cudabackend "TestFP8SiLUQuantRows|TestMLPFP8|TestQuantRowsE4M3|TestMatMulFP8Lt|TestMatMulFP8\$|TestTunedGEMM|TestMatMul\$|TestMatMulAdd|TestEarlyWeights|TestNormProjectorGPU|TestRMSNorm|TestAddRMSNormGPU|TestMatMulN|TestGateUpSiLU|TestFP8GEMVv|TestDependentLaunch${OPS_EXTRA:-}" &
runt models all models/all "TestFP8GEMMPrefill|TestFP8Checkpoints|TestFP8MLPFusedPrefill|TestBatchEveryDevice|TestFP8FusedDecode|TestFusedDecodeSwitchesGPU${MODELS_EXTRA:-}" &
wait
cat "$out/tests.txt"; grep -hE '^\s*--- FAIL' "$out"/test-*.log | head -20; grep -h -A6 -E '^\s*--- FAIL' "$out"/test-*.log | grep -v -- '--- PASS' | head -40
sed -i 's/"max_position_embeddings": 8192/"max_position_embeddings": 40960/' $m/config.json
one() { # tag env... -- bench args
  left || { echo "$1: skipped (time)" | tee -a "$out/summary.txt"; return; }
  local tag=$1; shift; local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  local f="$out/$tag.txt"
  env "${envs[@]}" timeout 60 $b bench --device cuda:0 --budgets resident "$@" >"$f" 2>&1
  local k r g
  k=$(grep -E '^(attn_|cublas|gemv|fp8|quant|rms)' "$f" | sort -k3 -nr | head -4 | awk '{printf "%s %s ms; ", $1, $3}')
  r=$(grep -E '^resident' "$f" | awk '{printf "row: %s ", $0}' | tr -s ' ')
  g=$(grep replayed "$f" | sed 's/.*device: /graph /')
  echo "$tag: $r $g | $k" | tee -a "$out/summary.txt"
}
log benches
timeout 30 $b run-model --model $m --device cuda:0 --token-ids $ids --max-new-tokens 256 --ignore-eos 2>&1 | tail -1 | sed 's/^/run-model: /' | tee -a "$out/summary.txt"
FT_FUSE_NORM=0 timeout 30 $b run-model --model $m --device cuda:0 --token-ids $ids --max-new-tokens 256 --ignore-eos 2>&1 | tail -1 | sed 's/^/run-model FT_FUSE_NORM=0: /' | tee -a "$out/summary.txt"
one dec512 NOOP=1 -- --model $m --mode decode --context 512 --iters 20
one dec512-nonorm FT_FUSE_NORM=0 -- --model $m --mode decode --context 512 --iters 20
one dec512-prof NOOP=1 -- --model $m --mode decode --context 512 --iters 20 --kernel-profile
one dec8k NOOP=1 -- --model $m --mode decode --context 8192 --iters 10 --warmup 1
one dec32k NOOP=1 -- --model $m --mode decode --context 32000 --iters 5 --warmup 1
one batch NOOP=1 -- --model $m --batch 64,256 --context 512 --iters 5 --warmup 2
[ -n "${BATCH_AB:-}" ] && one "batch-$BATCH_AB" $BATCH_AB -- --model $m --batch 64,256 --context 512 --iters 5 --warmup 2
one b64-prof NOOP=1 -- --model $m --batch 64 --context 512 --iters 5 --warmup 2 --kernel-profile
one pre8k NOOP=1 -- --model $m --mode prefill --tokens 8192 --iters 2 --warmup 1
one packed NOOP=1 -- --model $m --batch 64 --mode prefill --tokens 512 --iters 2 --warmup 1
one packed-cublas FT_GEMM=cublas -- --model $m --batch 64 --mode prefill --tokens 512 --iters 2 --warmup 1
one pre2k NOOP=1 -- --model $m --mode prefill --tokens 2048 --iters 3 --warmup 1
rm -rf $m; f8=/tmp/llama3-8b-fp8
left 450 && { log make-fp8; timeout 90 $b make-model --shape llama3-8b --dtype fp8-channel --out $f8 >"$out/make-fp8.txt" 2>&1; }
one fp8pre NOOP=1 -- --model $f8 --mode prefill --tokens 2048 --iters 3 --warmup 1
one fp8pre-nofuse FT_FP8_FUSE=0 -- --model $f8 --mode prefill --tokens 2048 --iters 3 --warmup 1
one fp8pre-prof NOOP=1 -- --model $f8 --mode prefill --tokens 2048 --iters 3 --warmup 1 --kernel-profile
one fp8dec NOOP=1 -- --model $f8 --mode decode --context 512 --iters 20
log done
