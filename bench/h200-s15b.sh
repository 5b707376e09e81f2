#!/usr/bin/env bash
# Session 15, call b (about 6 minutes): FT_GEMV_EARLY=1 (the one-token
# GEMVs' first weight loads before the dependent-launch wait) against the
# default, with and without FT_DECODE_CHUNK=256 (one attention split up to
# 256 positions), on run-model (Llama-3-8B and Qwen3-8B shapes) and the
# graph step at contexts 512, 2,048 and 8,192; the bit-identity test of the
# early twins; the same ids with the switch on and off (--json).
# Usage (repo root, GPU machine): bash bench/h200-s15b.sh OUTDIR
set -uo pipefail
source .devtools/env.sh
out=${1:?}; mkdir -p "$out"
source bench/lib.sh
BUDGET=500
build_cuda
export FT_KERNEL_CACHE=$PWD/bin/kernels
compile_tests kernels/cudabackend
q3=/tmp/qwen3-8b
(MT=240 make_models) &
timeout 240 $b make-model --shape qwen3-8b --out $q3 >"$out/make-model-q3.txt" 2>&1
sed -i 's/"max_position_embeddings": [0-9]*/"max_position_embeddings": 40960/' $q3/config.json
wait
log ready
TT=90 runt early cudabackend kernels/cudabackend 'TestGEMVPipeBitIdentical|TestCapturedStep'
R="-- --max-new-tokens 256"
rmodel d1 NOOP=1 $R
rmodel e1 FT_GEMV_EARLY=1 $R
rmodel d2 NOOP=1 $R
rmodel e2 FT_GEMV_EARLY=1 $R
rmodel c256 FT_DECODE_CHUNK=256 $R
rmodel e-c256 FT_GEMV_EARLY=1 FT_DECODE_CHUNK=256 $R
rmodel d3 NOOP=1 $R
rmodel e3 FT_GEMV_EARLY=1 $R
rmodel e-c256b FT_GEMV_EARLY=1 FT_DECODE_CHUNK=256 $R
rmodel djson NOOP=1 -- --max-new-tokens 256 --json
rmodel ejson FT_GEMV_EARLY=1 -- --max-new-tokens 256 --json
python3 - "$out" <<'PY' | tee -a "$out/summary.txt"
import json,sys,re
def ids(f):
    m=re.search(r'"generated_ids":\s*\[([^\]]*)\]', open(f).read())
    return [int(v) for v in m.group(1).split(',') if v.strip()] if m else None
a=ids(sys.argv[1]+'/rm-djson.txt'); b=ids(sys.argv[1]+'/rm-ejson.txt')
print('json ids: default %s, early %s, equal %s' % (len(a or []), len(b or []), a==b and a is not None))
PY
D="--model $m --budgets resident --mode decode --iters 20"
one g512 NOOP=1 -- $D --context 512
one g512e FT_GEMV_EARLY=1 -- $D --context 512
one g2k NOOP=1 -- $D --context 2048
one g2kc FT_DECODE_CHUNK=256 -- $D --context 2048
one g8k NOOP=1 -- $D --context 8192
one g8ke FT_GEMV_EARLY=1 -- $D --context 8192
one g8kc FT_DECODE_CHUNK=256 -- $D --context 8192
m=$q3 rmodel q3-d1 NOOP=1 $R
m=$q3 rmodel q3-e1 FT_GEMV_EARLY=1 $R
m=$q3 rmodel q3-d2 NOOP=1 $R
m=$q3 rmodel q3-e2 FT_GEMV_EARLY=1 $R
m=$q3 rmodel q3-ec FT_GEMV_EARLY=1 FT_DECODE_CHUNK=256 $R
cat "$out/tests.txt" >>"$out/summary.txt"
finish
