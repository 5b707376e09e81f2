#!/usr/bin/env bash
# Session 30, call a (written in session 29 after its device time ran
# out): the tests of what landed without a GPU run, then issue 18's
# resident FP8 figure at the µs (infer bench now prints the graph step
# with three decimals; the line is 1.25 × 1.97 = 2.4625 ms).
# (1) kernels/cudabackend: TestDecodeClusterGPU with the final cluster rule
# (8 splits from 257 rows up to 2,048), the argmax tests (the scan's loads
# batched 8 at a time; ArgmaxRows' counters apart from its partials,
# zeroed once: no memset before the argmax) and the decode tests around
# them; models/all GPU/golden/batch and FP8 tests. (2) the FP8 step at 512
# four times, the global merge (FT_DECODE_CLUSTER=0) twice, BF16 at 512,
# the 8 GiB FP8 row (issue 18: ≤ 1.10 × its plan's floor), run-model.
# (3) the block trace (the argmax's time after the LM head). Also the
# 4-warp cluster twins (FT_DECODE_CLUSTER_WARPS=4: s29d's trace had the
# 8-warp twins' blocks start ~1.6 µs later than the plain kernel's), and
# FT_FP8_PF=1 (the persistent FP8 GEMVs ask L2 for their first tile's
# later k-steps before their wait; the FP8 model tests run with it too),
# and FT_FP8_VARIANT=mp2 (o and down as mp2 too: 78 registers, so an SM
# running o's two blocks has room for a gate·up block to start early),
# and FT_GEMV=bal2 (in the FP8 model only the BF16 LM head: its rows cut
# in two, at most 61 halves (30.5 rows' worth) a warp instead of 31 rows; the
# trace had its last block end ~10 µs after its median one), and
# FT_FP8_XB=1 (the folded-norm persistent GEMVs batch x's loads when they
# stage it; TestFP8PersistBitIdentical checks their bits first).
# Usage (repo root, GPU machine): bash bench/h200-s30a.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=560
start_call kernels/cudabackend models/all
make_fp8
log tests
TT=150 runt kern cudabackend kernels/cudabackend 'TestDecodeClusterGPU|Argmax|TestEnvSwitch|TestFP8PersistBitIdentical|TestCapturedStep|TestContigPipeFor|TestDecodePipePositions|TestDecodePipeCapturedStep'
TT=150 runt models all models/all 'GPU|TestGolden|TestBatch'
TT=60 runt models-fp8 all models/all 'FP8'
FT_FP8_PF=1 TT=60 runt models-fp8-pf all models/all 'FP8'
tests_done || { finish; exit 0; }
R="--budgets resident --mode decode --context 512"
log bench
for r in a b; do
  one f8-$r -- --model $f8 $R --iters 20
  one f8-off-$r FT_DECODE_CLUSTER=0 -- --model $f8 $R --iters 20
  one f8-w4-$r FT_DECODE_CLUSTER_WARPS=4 -- --model $f8 $R --iters 20
  one f8-pf-$r FT_FP8_PF=1 -- --model $f8 $R --iters 20
  one f8-mp2-$r FT_FP8_VARIANT=mp2 -- --model $f8 $R --iters 20
  one f8-bal2-$r FT_GEMV=bal2 -- --model $f8 $R --iters 20
  one f8-xb-$r FT_FP8_XB=1 -- --model $f8 $R --iters 20
  one f8-$r$r -- --model $f8 $R --iters 20
done
one f8-2k -- --model $f8 --budgets resident --mode decode --context 2000 --iters 20
one f8-w4-2k FT_DECODE_CLUSTER_WARPS=4 -- --model $f8 --budgets resident --mode decode --context 2000 --iters 20
one bf -- --model $m $R --iters 20
one f8-8g -- --model $f8 --budgets 8GiB --mode decode --context 512 --iters 10
rmodel bf -- --max-new-tokens 256
o=$(cd "$out" && pwd)
if left 420; then
  log traced
  BT=200 one f8-traced FT_BLOCK_TRACE=$o/trace.txt -- --model $f8 $R --iters 10
  grep -E "^# " "$o/trace.txt" | head -14 >>"$out/summary.txt"
  grep -E "gemv_persist|argmax|rmsnorm_f32in" "$o/trace.txt" | head -4 >>"$out/summary.txt"
fi
finish
