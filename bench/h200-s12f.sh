#!/usr/bin/env bash
# Session 12, call f (about 4 minutes): after the last mends (the offload
# manager records its engine through setEngine and keeps the failure in an
# atomic), the offload and host-placement GPU tests again.
# Usage (repo root, GPU machine): bash bench/h200-s12f.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
compile_tests models/all
wait
export FT_KERNEL_CACHE=$PWD/bin/kernels
log tests
TT=200 runt model all models/all 'TestOffloadedEqualsResident|TestHostPlacementDevice|TestBatchOffloaded|TestMoEOffloadEqualsResident'
cat "$out/tests.txt"
grep -E "^\s*--- FAIL|panic" "$out"/test-*.log | head -20
finish
