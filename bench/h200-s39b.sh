#!/usr/bin/env bash
# Session 39, call b: where the time of the 64 × 512 packed step goes with
# the last layer's queries for every row (FT_LAST_LAYER=attend-all) and for
# the returned rows alone (default, attendKept with k and v merged), one
# kernel-profiled step each; one more interleaved round of the two; then
# the GPU tests of the packages the change touches, whole: models/all,
# models/decoder, offload, session.
# Usage (repo root, GPU machine): bash bench/h200-s39b.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=560
start_call models/all models/decoder offload session
log profiles
P="--model $m --budgets resident --warmup 1"
BT=60 one prof-att FT_LAST_LAYER=attend-all -- $P --mode prefill --batch 64 --tokens 512 --iters 1 --kernel-profile
BT=60 one prof-def NOOP=1 -- $P --mode prefill --batch 64 --tokens 512 --iters 1 --kernel-profile
BT=60 one pk64-att-d FT_LAST_LAYER=attend-all -- $P --mode prefill --batch 64 --tokens 512 --iters 6
BT=60 one pk64-def-d NOOP=1 -- $P --mode prefill --batch 64 --tokens 512 --iters 6
for f in "$out"/pk64-*.txt; do echo "$(basename $f .txt) $(grep -h 'steps ms' $f)"; done >>"$out/summary.txt"
log tests
TT=170 runt all all models/all '.'
TT=60 runt decoder decoder models/decoder '.'
left 330 && TT=$(( 470 - ($(date +%s) - t0) )) runt offload offload offload '.'
left 470 && TT=$(( 555 - ($(date +%s) - t0) )) runt session session session '.'
tests_done
finish
