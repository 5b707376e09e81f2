#!/usr/bin/env bash
# Session 17, call d (about 4 minutes): issue 20's budget 0 + host figure
# with one core left to the process's own threads. s17c measured 101.4 and
# 104.3 ms with 16 workers on the 16 cores (420 involuntary context
# switches in 8 forwards); this call interleaves 16, 15 (workers spin
# between tasks, the default below NumCPU), 15 without spinning, and 14.
# Usage (repo root, GPU machine): bash bench/h200-s17d.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=400
build_cuda
MT=240 make_models
export FT_KERNEL_CACHE=$PWD/bin/kernels
log figures
for r in 1 2; do
  HB=0 HI=10 hyb t16-$r NOOP=1
  HB=0 HI=10 HX="--host-threads 15" hyb t15-$r NOOP=1
  HB=0 HI=10 HX="--host-threads 15" hyb t15nospin-$r FT_HOST_SPIN=0
  HB=0 HI=10 HX="--host-threads 14" hyb t14-$r NOOP=1
done
for f in "$out"/hyb-*.txt; do echo "$(basename $f): $(grep -o 'timed forwards.*ms;' $f | tail -1) $(grep -o 'context switches.*' $f | tail -1)"; done | tee -a "$out/summary.txt"
finish
