#!/usr/bin/env bash
# Decode attention variants of the fourth session (issues 15, 21): the FAST
# path ("f": L2 prefetch before the dependent-launch wait, query after the
# first copies, one-round-trip merge) at the default's shape and in small
# blocks (2 and 1 warps), against the default s3w4h1r and the
# single-buffered kernel. GPU tests of those variants first, then one
# sequence at contexts 32,000 and 8,192 and 512, and the batch of 64 at
# 512 (one split a row: FT_DECODE_SPLITS=1). One line a run in
# OUTDIR/summary.txt: attention kernel ms and GB/s (eager kernel profile),
# graph step ms and tokens/s (single sequence) or step ms and tokens/s
# (batch).
# Usage (repo root, GPU machine): bench/h200-decsweep4.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
log() { echo "== $(date +%T) $*" | tee -a "$out/steps.log"; }
b=bin/infer-cuda; m=/tmp/llama3-8b
git rev-parse --short HEAD >"$out/commit.txt" 2>/dev/null
log build; timeout 150 make build-cuda >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
log tests
modes='_(pipe|pipe_splits_1|pipe_s3w4h1rf|pipe_s3w2h1rf|pipe_s4w2h1rf|pipe_s4w1h1rf|pipe_s6w1h1rf|mma)$'
GOFLAGS="-run=TestDecodeMMA/$modes|TestPagedDecodeMMA/$modes|TestDecodePipePositions|TestDecodePipeCapturedStep|TestCapturedStep" \
  timeout 300 make -s test-cuda CUDA_PKGS='./kernels/cudabackend' >"$out/tests.log" 2>&1
echo "kernel tests rc=$?" | tee -a "$out/steps.log"; grep -E '^(--- FAIL|FAIL|ok|panic)' "$out/tests.log" | head; grep -A10 -- '--- FAIL' "$out/tests.log" | head -40
log make-model; [ -d $m ] || timeout 120 $b make-model --shape llama3-8b --out $m >"$out/make-model.txt" 2>&1
sed -i 's/"max_position_embeddings": 8192/"max_position_embeddings": 40960/' $m/config.json
one() { # tag env... -- bench args
  local tag=$1; shift; local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  local f="$out/$tag.txt"
  env "${envs[@]}" timeout 60 $b bench --model $m --device cuda:0 --budgets resident "$@" >"$f" 2>&1
  local attn graph batch
  attn=$(grep -E '^attn_' "$f" | awk '{printf "%s %s ms %s GB/s; ", $1, $3, $6}')
  graph=$(grep replayed "$f" | sed 's/.*device: //' | awk '{printf "graph %s ms %.1f tok/s", $1, 1000/$1}')
  batch=$(grep -E '^resident' "$f" | awk 'NF<=8 {printf "step %s ms %s tok/s", $3, $5}')
  echo "$tag: $attn$graph$batch" | tee -a "$out/summary.txt"
}
log context 32000
for v in s3w4h1r s3w4h1rf s3w2h1rf s6w1h1rf; do
  one "dec32k-$v" FT_DECODE_VARIANT=$v -- --mode decode --context 32000 --iters 5 --warmup 1 --kernel-profile
done
log context 8192
for v in s3w4h1r s3w4h1rf s3w2h1rf; do
  one "dec8k-$v" FT_DECODE_VARIANT=$v -- --mode decode --context 8192 --iters 5 --warmup 1
done
log context 512
for v in s3w4h1r s3w4h1rf; do
  one "dec512-$v" FT_DECODE_VARIANT=$v -- --mode decode --context 512 --iters 10 --warmup 1
done
log batch 64
one b64-s3w4h1r NOOP=1 -- --batch 64 --context 512 --iters 5 --warmup 2 --kernel-profile
one b64-mma FT_DECODE_PIPE=0 -- --batch 64 --context 512 --iters 5 --warmup 2 --kernel-profile
for v in s3w4h1rf s3w2h1rf s4w1h1rf s6w1h1rf; do
  one "b64-$v" FT_DECODE_VARIANT=$v FT_DECODE_SPLITS=1 -- --batch 64 --context 512 --iters 5 --warmup 2 --kernel-profile
done
log done
