#!/usr/bin/env bash
# Session 9, call d (about 6 minutes): where the hybrid's run-to-run spread
# comes from.
#   - bench-host --chunk-map: the host read rate of every 256 MiB chunk of a
#     fresh 16 GiB huge-page mapping, three passes, three fresh mappings a
#     process; three processes, each followed by a hybrid run (budgets 0
#     and 8 GiB + host) so the probe's state can be set against the hybrid's;
#   - the decode A/B GPU tests after FT_L2_BRANCH's removal.
# Usage (repo root, GPU machine): bash bench/h200-s9d.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=540
compile_tests models/all
build_cuda
wait
make_models
export FT_KERNEL_CACHE=$PWD/bin/kernels
cm() { # tag args...
  left 480 || return; local tag=$1; shift; log "chunk-map $tag"
  timeout 120 $b bench-host --chunk-map 16 --threads 16 --chunk-passes 3 "$@" >"$out/cm-$tag.txt" 2>&1
  echo "cm $tag:" | tee -a "$out/summary.txt"
  grep -iE 'summary|median|within|between|allocation|huge|below' "$out/cm-$tag.txt" | grep -v '^ *[0-9]' | head -20 | tee -a "$out/summary.txt"
}
hyb() { # tag env...
  left 480 || { echo "hyb $1: skipped (time)" | tee -a "$out/summary.txt"; return; }
  local tag=$1; shift; log "hyb $tag"
  env FT_TRACE=1 "$@" timeout 100 $b bench --device cuda:0 --model $m --budgets 0,8GiB --mode decode --iters 10 --host-threads 16 >"$out/hyb-$tag.txt" 2>&1
  echo "hyb $tag: $(grep -E '^(0\+host|8GiB\+host)' "$out/hyb-$tag.txt" | tr -s ' ' | tr '\n' '|') $(grep -o 'host unit measured [0-9.]* ms' "$out/hyb-$tag.txt" | tr '\n' ' ')" | tee -a "$out/summary.txt"
}
log tests
TT=90 runt dec all models/all 'TestGEMVBalDecodeGPU|TestGEMVMixedDecodeGPU|TestFusedRoPEDecodeGPU|TestFusedDecodeSwitchesGPU|TestFP8AddDecodeGPU|TestNormTailDecodeGPU|TestHostPlacementDevice'
cat "$out/tests.txt"
cm p1 --chunk-fresh 3
hyb h1 NOOP=1
cm p2 --chunk-fresh 3
hyb h2 NOOP=1
cm p3 --chunk-mib 64
hyb h3 NOOP=1
cm p4 --chunk-fresh 2
cat "$out/tests.txt"
finish
