#!/usr/bin/env bash
# A/B of resident prefill 2048 and decode between a base tree (.base/, a
# `git archive` of the base commit with this go.mod) and the working tree,
# interleaved in one GPU session. Usage: bench/ab-resident.sh (repo root).
set -uo pipefail
source .devtools/env.sh
make build-cuda >/tmp/ab-build.log 2>&1 || { tail -20 /tmp/ab-build.log; exit 1; }
(cd .base && ln -sfn /tmp/govendor/vendor vendor && make build-cuda >/tmp/ab-base.log 2>&1) || { tail -20 /tmp/ab-base.log; exit 1; }
m=/tmp/llama3-8b; [ -f $m/config.json ] || bin/infer-cuda make-model --shape llama3-8b --out $m >/dev/null
for round in 1 2 3; do
  for b in .base/bin/infer-cuda bin/infer-cuda; do
    for mode in "prefill --tokens 2048 --iters 10 --warmup 2" "decode --context 512 --iters 20"; do
      r=$($b bench --model $m --device cuda:0 --budgets resident --mode $mode --json 2>/dev/null | grep -o '"measured_ms":[0-9.]*\|"min_ms":[0-9.]*' | tr '\n' ' ')
      echo "round $round $b ${mode%% *}: $r"
    done
  done
done
