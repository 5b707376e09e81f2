#!/usr/bin/env bash
# Session 30, call c: the push-merge cluster twins as the default (s30b:
# FP8 step at 512 2.425/2.414 against 2.445/2.442 ms). (1) tests:
# TestDecodeClusterGPU (push against the remote-load merge, bit for bit),
# the capture tests; models/all GPU/golden/batch and FP8. (2) the HBM
# rate on this machine (BenchmarkCopyD2D: 4 GiB device-to-device copies,
# read + written), so that issue 18's floor (8.03 GB a step) can be taken
# at this GPU's rate as well as at the 4.08 TB/s every session used; the
# clocks under load. (3) issue 18's figures at this commit: the resident
# FP8 step at 512 (three rounds, the remote-load merge twice), at 2,000,
# the 8 GiB FP8 row, BF16 at 512, run-model. (4) issue 15's prefill
# figures on this machine (8,192 tokens; 64 × 512 packed), if time is left.
# Usage (repo root, GPU machine): bash bench/h200-s30c.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=560
start_call kernels/cudabackend models/all bench
make_fp8
log tests
TT=150 runt kern cudabackend kernels/cudabackend 'TestDecodeClusterGPU|TestEnvSwitch|TestCapturedStep|TestContigPipeFor|TestDecodePipeCapturedStep'
TT=150 runt models all models/all 'GPU|TestGolden|TestBatch'
TT=60 runt models-fp8 all models/all 'FP8'
tests_done || { finish; exit 0; }
log d2d
(cd bench && timeout 120 /tmp/t/bench.test -test.run '^$' -test.bench 'CopyD2D$' -test.benchtime 20x >"$out/d2d.txt" 2>&1)
grep -E "CopyD2D|GB/s" "$out/d2d.txt" | head -3 >>"$out/summary.txt"
R="--budgets resident --mode decode --context 512"
log bench
for r in a b c; do
  one f8-$r -- --model $f8 $R --iters 20
  [ $r = c ] || one f8-pull-$r FT_DECODE_CLUSTER_PUSH=0 -- --model $f8 $R --iters 20
done
one f8-2k -- --model $f8 --budgets resident --mode decode --context 2000 --iters 20
one f8-8g -- --model $f8 --budgets 8GiB --mode decode --context 512 --iters 10
one bf -- --model $m $R --iters 20
rmodel bf -- --max-new-tokens 256
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu --format=csv >>"$out/summary.txt" 2>&1
if left 330; then
  log prefill
  P="--model $m --budgets resident --mode prefill --warmup 1"
  BT=120 one pf8k -- $P --tokens 8192 --iters 3
  BT=150 one pk64 -- $P --batch 64 --tokens 512 --iters 2
fi
finish
