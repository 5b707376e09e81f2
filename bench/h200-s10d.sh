#!/usr/bin/env bash
# Session 10, call d (about 7 minutes): issue 20's figures with the session's
# final defaults (FT_HOST_PREFETCH=1024 now the default, copies measured
# beside host units, block rates, the embedding table on the host), against
# FT_HOST_PREFETCH=0, interleaved, from a dropped page cache.
# Usage (repo root, GPU machine): bash bench/h200-s10d.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
build_cuda
MT=240 make_models
export FT_KERNEL_CACHE=$PWD/bin/kernels
sync; echo 3 >/proc/sys/vm/drop_caches
HI=8 HT=60 LEFT=300 hyb d1 NOOP=1
HI=8 HT=60 LEFT=320 hyb pf0-1 FT_HOST_PREFETCH=0
HI=8 HT=60 LEFT=340 hyb d2 NOOP=1
HI=8 HT=60 LEFT=360 hyb pf0-2 FT_HOST_PREFETCH=0
HI=8 HT=60 LEFT=380 hyb d3 NOOP=1
HI=8 HT=60 LEFT=390 hyb pf0-3 FT_HOST_PREFETCH=0
HI=8 HT=60 LEFT=400 hyb d4 NOOP=1
finish
