#!/usr/bin/env bash
# Session 33, call a (written for a later session; session 33 had no
# device): the host kernels' AMX products on the H200 machine's host (16
# cores, Xeon model 207, AMX) for the first time: their tests, the product
# benchmark against the AVX-512 tiles, a 64-token single-sequence forward
# at budgets 0 and 8 GiB with 16 host threads (the planner now times the
# host's products at the forward's token count, a355437) with and without
# AMX, and the one-token hybrid decode beside it (unchanged: T = 1 never
# takes the tiles). Run bench/h200-s32a.sh (issue 15's figures) first.
# Usage (repo root, GPU machine): bash bench/h200-s33a.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=560
start_call kernels/host
log tests
TT=120 runt amx host kernels/host 'AMX|FixturesEqualReference|PagedAttention'
tests_done
log amx-bench
(cd kernels/host && timeout 150 /tmp/t/host.test -test.run '^$' -test.bench 'AMXMatMul/(2048x2048|8192x2048|2048x8192)/T(16|64|128)' \
  -test.benchtime 20x -test.cpu 16 >"$out/amx-bench.txt" 2>&1)
grep -E '^Benchmark' "$out/amx-bench.txt" | awk '{print "amx-bench", $1, $3, $5}' >>"$out/summary.txt"
log hybrid
HB=0,8GiB HI=5 HX="--mode prefill --tokens 64" HT=150 LEFT=380 hyb p64-amx
HB=0,8GiB HI=5 HX="--mode prefill --tokens 64" HT=150 LEFT=450 hyb p64-noamx FT_HOST_AMX=off
HB=0,8GiB HT=120 LEFT=520 hyb dec-amx
finish
