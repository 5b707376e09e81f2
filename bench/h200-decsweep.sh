#!/usr/bin/env bash
# Sweep of the pipelined decode attention's compiled variants and split
# counts on the H200 (issues 15 and 21): GPU tests of every variant against
# the CPU reference, then resident decode at contexts 32,000 and 8,192 and
# the batch-64 step for each variant (FT_DECODE_VARIANT), context 512 for
# the default and the single-buffered kernel (FT_DECODE_PIPE=0), and split
# counts (FT_DECODE_SPLITS) for the default. One line per run: the
# attention kernel's ms and GB/s over the profiled step, the eager step and
# the graph-replayed step (one sequence) or the batch step.
# Usage (repo root, GPU machine): bench/h200-decsweep.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
log() { echo "== $(date +%T) $*" | tee -a "$out/steps.log"; }
b=bin/infer-cuda; m=/tmp/llama3-8b
log build; timeout 200 make build-cuda >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
log tests
GOFLAGS='-run=TestDecodeMMA|TestDecodePipePositions|TestPagedDecodeMMA' timeout 300 make -s test-cuda CUDA_PKGS='./kernels/cudabackend' >"$out/tests.log" 2>&1
echo "tests rc=$?" | tee -a "$out/steps.log"; grep -E '^(--- FAIL|FAIL|ok|panic)' "$out/tests.log" | head -20; grep -A12 -- '--- FAIL' "$out/tests.log" | head -60
log make-model
if [ ! -d $m ]; then timeout 120 $b make-model --shape llama3-8b --out $m >"$out/make-model.txt" 2>&1 || { tail "$out/make-model.txt"; exit 1; }; fi
sed -i 's/"max_position_embeddings": 8192/"max_position_embeddings": 40960/' $m/config.json
# one TAG ENV... -- BENCH ARGS: one bench run under the given environment.
one() {
  local tag=$1; shift; local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  local f="$out/$tag.txt"
  env "${envs[@]}" timeout 60 $b bench --model $m --device cuda:0 --budgets resident "$@" --kernel-profile >"$f" 2>&1
  echo "$tag: $(grep -E '^attn_' "$f" | awk '{printf "%s %s ms %s GB/s; ", $1, $3, $6}') step $(grep '^resident' "$f" | awk '{print (NF>8 ? $10 : $3)}') $(grep replayed "$f" | sed 's/.*device: //')" | tee -a "$out/summary.txt"
}
dec() { local tag=$1 c=$2; shift 2; one "$tag-ctx$c" "$@" -- --mode decode --context "$c" --iters 10 --warmup 2; }
bat() { local tag=$1; shift; one "$tag-batch64" "$@" -- --batch 64 --context 512 --iters 5 --warmup 2; }
log variants
for v in s3w4h1r s3w4h1o s2w4h1o s2w4h1r s4w4h1r s3w8h1r s2w4h4r s3w4h4r s2w8h8r s3w8h8r; do
  dec "$v" 32000 FT_DECODE_VARIANT=$v; dec "$v" 8192 FT_DECODE_VARIANT=$v; bat "$v" FT_DECODE_VARIANT=$v
done
dec default 512 FT_DECODE_VARIANT=
log old kernels
for c in 32000 8192 512; do dec old "$c" FT_DECODE_PIPE=0; done
bat old FT_DECODE_PIPE=0
log splits of the default
for s in 16 66 132; do dec "splits$s" 32000 FT_DECODE_SPLITS=$s; done
for s in 2 4; do bat "splits$s" FT_DECODE_SPLITS=$s; done
log done
