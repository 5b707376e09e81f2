#!/usr/bin/env bash
# The sixth 2026-12-01 session's second GPU call (about 6 minutes): the
# host-placed layer's stage breakdown at 16 threads (bench-host --layer)
# with the one-op layer and its switches, the host kernels' bandwidth, the
# hybrid decode figures (budgets 0 and 8 GiB + 16 host threads) with the new
# defaults and the old path, then what each kernel of the resident decode
# step costs inside the replayed graph (FT_SKIP_KERNELS drops launches: the
# steps' results are wrong, their times are the point).
# Usage (repo root, GPU machine): bash bench/h200-s6b.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=520
build_cuda
log make-models
make_models
log host-layer
hl() { # tag env... : bench-host --layer at 16 threads
  local tag=$1; shift
  env "$@" timeout 40 $b bench-host --layer --threads 16 >"$out/hl-$tag.txt" 2>&1
  echo "hl-$tag: $(grep -iE 'median|step|floor|STREAM' "$out/hl-$tag.txt" | head -4 | tr -s ' ' | tr '\n' ';')" | tee -a "$out/summary.txt"
}
hl default NOOP=1
hl jobs FT_HOST_LAYER=jobs
hl old FT_HOST_LAYER=0 FT_HOST_ATTN=legacy
hl spin0 FT_HOST_SPIN=0
hl pf1024 FT_HOST_PREFETCH=1024
hl pf2048 FT_HOST_PREFETCH=2048
timeout 60 $b bench-host --threads 16 --tokens 1 --kinds bf16 >"$out/bench-host.txt" 2>&1
FT_HOST_PREFETCH=1024 timeout 60 $b bench-host --threads 16 --tokens 1 --kinds bf16 >"$out/bench-host-pf1024.txt" 2>&1
log knockouts
R="--budgets resident"; BT=60
D="$R --model $m --mode decode --context 512 --iters 20"
one ko-none NOOP=1 -- $D
one ko-norm FT_SKIP_KERNELS=rmsnorm -- $D
one ko-rope FT_SKIP_KERNELS=rope_ -- $D
one ko-attn FT_SKIP_KERNELS=attn_ -- $D
one ko-small FT_SKIP_KERNELS=rmsnorm,rope_,attn_ -- $D
one ko-qkv FT_SKIP_KERNELS=gemv3_ -- $D
one ko-od FT_SKIP_KERNELS=gemv_persist_f32acc -- $D
one ko-gateup FT_SKIP_KERNELS=gemv_gateup -- $D
one ko-onlygateup FT_SKIP_KERNELS=rmsnorm,rope_,attn_,gemv3_,gemv_persist_f32acc -- $D
one ko-none-b NOOP=1 -- $D
log hybrid
H="--model $m --budgets 0,8GiB --mode decode --context 512 --iters 5 --host-threads 16"
BT=150 one hybrid NOOP=1 -- $H
BT=150 one hybrid-old FT_HOST_LAYER=0 FT_HOST_ATTN=legacy -- $H
finish
