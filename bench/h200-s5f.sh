#!/usr/bin/env bash
# The fifth 2026-12-01 session's ping-pong check (about 5 minutes): the wg3
# prefill attention (wg with the two warpgroups' GEMMs and softmax
# alternating on named barriers) against the CPU reference, then prefill
# 8,192 and 64 × 512 packed with it against the default wg, one line a run;
# also the decode attention tests of the default variants after their split
# range moved into one function.
# Ran once at 570dace: the wg3 test binary printed nothing within 90 s (its
# backend compiles the sm_90a module at start) and the decode test was cut
# by its 60 s limit with every subtest so far within tolerance; wg3 was then
# reverted (1f72dfb).
# Usage (repo root, GPU machine): bash bench/h200-s5f.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"; t0=$(date +%s)
log() { echo "== $(date +%T) +$(( $(date +%s) - t0 ))s $*" | tee -a "$out/steps.log"; }
left() { [ $(( $(date +%s) - t0 )) -lt ${1:-330} ]; }
b=bin/infer-cuda; m=/tmp/llama3-8b
log build; timeout 170 make build-cuda >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
mkdir -p /tmp/t; R=$PWD; C=/usr/local/cuda
export CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -I$R/runtime/cuda/compat -I$C/include" \
  CGO_LDFLAGS="-L$C/lib64 -L$C/lib64/stubs -Wl,--disable-new-dtags,-rpath,$C/lib64:/usr/local/nvidia/lib64" \
  LD_LIBRARY_PATH="$C/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}"
log compile-tests+make-model
(timeout 170 go test -tags cuda -c -o /tmp/t/cudabackend.test ./kernels/cudabackend >"$out/compile.log" 2>&1) &
timeout 120 $b make-model --shape llama3-8b --out $m >"$out/make-model.txt" 2>&1
wait
log tests
(cd kernels/cudabackend && timeout 90 /tmp/t/cudabackend.test -test.count=1 -test.v -test.run 'TestPrefillWGModule|(TestPrefillAttentionKernels|TestVarlenPrefillKernels)/.*/^wg3$' >"$out/test-wg3.log" 2>&1; echo "test wg3 rc=$?: $(grep -cE '^\s*--- PASS' "$out/test-wg3.log") passed, $(grep -cE '^\s*--- FAIL' "$out/test-wg3.log") failed" | tee -a "$out/summary.txt")
(cd kernels/cudabackend && timeout 60 /tmp/t/cudabackend.test -test.count=1 -test.v -test.run '(TestDecodeMMA|TestPagedDecodeMMA|TestDecodePipeCapturedStep)/pipe_s3w4h1[rt]($|_chunk)' >"$out/test-dec.log" 2>&1; echo "test dec rc=$?: $(grep -cE '^\s*--- PASS' "$out/test-dec.log") passed, $(grep -cE '^\s*--- FAIL' "$out/test-dec.log") failed" | tee -a "$out/summary.txt")
grep -h -B2 -A8 -E '^\s*--- FAIL' "$out/test-wg3.log" "$out/test-dec.log" | head -30
one() { # tag env... -- bench args
  left || { echo "$1: skipped (time)" | tee -a "$out/summary.txt"; return; }
  local tag=$1; shift; local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" timeout 60 $b bench --device cuda:0 --budgets resident "$@" >"$out/$tag.txt" 2>&1
  echo "$tag: $(grep -E '^resident' "$out/$tag.txt" | tr -s ' ') $(grep -E '^attn_' "$out/$tag.txt" | awk '{printf "%s %s ms", $1, $3}')" | tee -a "$out/summary.txt"
}
log benches
P8="--model $m --mode prefill --tokens 8192 --iters 2 --warmup 1"
PK="--model $m --batch 64 --mode prefill --tokens 512 --iters 2 --warmup 1"
if grep -qE '^--- PASS: TestPrefillAttentionKernels' "$out/test-wg3.log" && ! grep -qE -- '--- FAIL' "$out/test-wg3.log"; then
  one pre8k NOOP=1 -- $P8
  one pre8k-wg3 FT_TRACE=1 FT_PREFILL_VARIANT=wg3 -- $P8
  one pre8k-b NOOP=1 -- $P8
  one pre8k-wg3-b FT_PREFILL_VARIANT=wg3 -- $P8
  one packed NOOP=1 -- $PK
  one packed-wg3 FT_PREFILL_VARIANT=wg3 -- $PK
  one pre8k-wg3-prof FT_PREFILL_VARIANT=wg3 -- $P8 --kernel-profile
else
  echo "wg3 tests did not pass: no benches" | tee -a "$out/summary.txt"
fi
log done
cd "$out" && tar czf all.tgz *.txt *.log 2>/dev/null; true
