#!/usr/bin/env bash
# Quick GPU check of a change (repo root, on the GPU machine): build with
# the kernels compiled ahead of time, start-to-first-token twice, make test-cuda.
source .devtools/env.sh
o=${1:-${OUT:-/tmp/gpu-check}}; mkdir -p $o
(make build-cuda 2>&1 | tail -15) > $o/build.txt; cat $o/build.txt | tail -5
ls -la bin/kernels 2>&1 | head -5
for r in first second; do FT_TRACE=1 /usr/bin/time -f "%e s wall" bin/infer-cuda run-model --device cuda:0 --token-ids 37,235,396,72,255,393,203,133,335,448,144,129 --max-new-tokens 1 2>&1 | grep -v "^prompt" | tail -8; done
timeout 400 make test-cuda > $o/test-cuda.txt 2>&1; echo "test-cuda rc=$?"
grep -E "^(--- FAIL|FAIL|ok|panic)|cannot|undefined|error" $o/test-cuda.txt | head -40
