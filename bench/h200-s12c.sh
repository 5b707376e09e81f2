#!/usr/bin/env bash
# Session 12, call c (about 7 minutes): issue 20 at budget 0, the first GPU
# measurement of FT_HOST_BLOCK_REALLOC (host units on blocks reading below
# 0.75 of the fastest get freshly allocated blocks that rate fast), interleaved
# with the default; each `infer bench --budgets 0 --mode decode --iters 10
# --host-threads 16` with FT_TRACE on; then the same with the page cache
# dropped first (s9e: a fresh mapping then gets the fast memory).
# Usage (repo root, GPU machine): bash bench/h200-s12c.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=560
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
MT=240 make_models
log hybrid
export HB=0 HT=90
rl() { grep -h "host block realloc\|block rates" "$out/hyb-$1.txt" | head -3 | cut -c1-400 | sed "s/^/$1: /" >>"$out/summary.txt"; }
hyb def1 NOOP=1; rl def1
hyb re1 FT_HOST_BLOCK_REALLOC=8; rl re1
hyb def2 NOOP=1; rl def2
hyb re2 FT_HOST_BLOCK_REALLOC=8; rl re2
hyb def3 NOOP=1; rl def3
hyb re3 FT_HOST_BLOCK_REALLOC=8; rl re3
sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null && log "page cache dropped"
hyb re4-dropped FT_HOST_BLOCK_REALLOC=8; rl re4-dropped
hyb def4 NOOP=1; rl def4
finish
