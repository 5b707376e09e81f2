#!/usr/bin/env bash
# Issue 19 figures on a machine of several GPUs (nvidia-h200-x2 and up):
# the Llama-3-8B shape (random bf16 weights), decode batch 1 at context 512,
# everything streamed (budget 0 per GPU) and resident, on one GPU and cut
# over 2 GPUs (and over all of them when there are more): each GPU's
# measured H2D bandwidth and streamed bytes, its floor (bytes per GPU ÷
# that GPU's H2D bandwidth), the measured step time against the slowest
# GPU's floor (issue 19: ≤ 1.10×), and the aggregate H2D GB/s achieved.
# About 5 minutes on 2 GPUs (most of it writing the 16 GB checkpoint and
# packing pinned memory). Output in OUTDIR; summary on stdout.
# Usage (repo root, on the GPU machine, after `source .devtools/env.sh`):
#   bench/h200-multigpu.sh OUTDIR
set -uo pipefail
out=${1:?usage: bench/h200-multigpu.sh OUTDIR}; mkdir -p "$out"
log() { echo "== $(date +%T) $*" | tee -a "$out/steps.log"; }
b=bin/infer-cuda; m=/tmp/llama3-8b
if [ ! -x $b ]; then
  log build; make build-cuda >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
fi
git rev-parse --short HEAD >"$out/commit.txt" 2>/dev/null
nvidia-smi --query-gpu=index,name,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv >"$out/gpu.txt"
nvidia-smi topo -m >"$out/topo.txt" 2>&1
cat "$out/gpu.txt"
n=$(nvidia-smi -L | grep -c '^GPU')
if [ "$n" -lt 2 ]; then echo "h200-multigpu: $n GPU visible; this needs 2 or more (nvidia-h200-x2)"; exit 1; fi
[ -f $m/config.json ] || { log make-model; $b make-model --shape llama3-8b --out $m >"$out/make-model.txt" 2>&1 || { cat "$out/make-model.txt"; exit 1; }; }
run() { # name device budgets
  log "bench $1 ($2, budgets $3)"
  timeout 170 $b bench --model $m --device "$2" --budgets "$3" --mode decode --context 512 --iters 10 --json >"$out/bench-$1.jsonl" 2>"$out/bench-$1.err"
  local rc=$?; [ $rc -eq 0 ] || { echo "bench $1 failed (exit $rc):"; tail -n 5 "$out/bench-$1.err"; }
}
run 1gpu cuda:0 0,resident
run 2gpu cuda:0,cuda:1 0,resident
if [ "$n" -gt 2 ]; then run ${n}gpu cuda:all 0; fi
log summary
python3 - "$out" <<'PY' | tee "$out/summary.txt"
import json, sys, glob, os
out = sys.argv[1]
print(f"{'run':8} {'budget':9} {'meas ms':>8} {'floor ms':>9} {'meas/floor':>10} {'aggr GB/s':>9}   per GPU: streamed GB, H2D GB/s, floor ms = bytes/H2D")
for path in sorted(glob.glob(os.path.join(out, "bench-*.jsonl"))):
    name = os.path.basename(path)[6:-6]
    for line in open(path):
        r = json.loads(line)
        devs = r.get("devices") or [{"device": "cuda:0", "streamed_bytes": r["streamed_bytes"], "h2d_gbps": r["h2d_gbps"], "transfer_floor_ms": r["transfer_floor_ms"]}]
        per = []
        floor = 0.0
        for d in devs:
            f = d["streamed_bytes"] / (d["h2d_gbps"] * 1e9) * 1e3 if d["h2d_gbps"] else 0.0
            floor = max(floor, f)
            per.append(f"{d['device']}: {d['streamed_bytes']/1e9:.2f} GB, {d['h2d_gbps']:.1f} GB/s, {f:.1f} ms")
        meas = r["measured_ms"]
        ratio = f"{meas/floor:.3f}" if floor else "-"
        aggr = r["streamed_bytes"] / (meas / 1e3) / 1e9 if meas and r["streamed_bytes"] else 0.0
        print(f"{name:8} {r['budget']:9} {meas:8.2f} {floor:9.2f} {ratio:>10} {aggr:9.1f}   " + "; ".join(per if r["streamed_bytes"] else []))
PY
log done
