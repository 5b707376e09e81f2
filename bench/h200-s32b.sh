#!/usr/bin/env bash
# Session 32, call b (written for the next session; session 32 had no
# device after its first call failed): an offloaded model's host-placed
# layers with FP8 weights, which run the host backend's fused FP8 ops since
# e9f1c54 (before, the inherited reference's products: one-token q/k/v and
# gate·up at reference speed; on the CPU device 281.9 -> 110.3 ms a step on
# llama3-1b), measured for the first time: the FP8 checkpoint at budgets 0
# and 8 GiB with 16 host threads, then the BF16 rows for the comparison
# sessions 19-20 measured (87-121 ms at 0+host, 50.8-57.3 at 8GiB+host).
# Usage (repo root, GPU machine): bash bench/h200-s32b.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=560
start_call
make_fp8
log hybrid
mbf=$m
m=$f8 HT=200 LEFT=300 hyb fp8
m=$mbf HT=200 LEFT=450 hyb bf16
finish
