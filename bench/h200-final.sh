#!/usr/bin/env bash
# The last GPU run of a session: CUDA tests, the offload engine's GPU tests
# (incl. per-layer graphs), graphs vs eager offloaded decode at 0 and 8 GiB,
# and profile restarts. Everything lands in OUTDIR/all.tgz (one file).
# Usage (repo root, on the GPU machine): bench/h200-final.sh OUTDIR
set -uo pipefail
out=${1:?}; w=/tmp/final; mkdir -p $w
log() { echo "== $(date +%T) $*" | tee -a $w/steps.log; }
b=bin/infer-cuda; m=/tmp/llama3-8b; ids=128000,9906,11,1917,0
CUDA_GO="env CGO_ENABLED=1 CGO_CFLAGS=-O2 -I$PWD/runtime/cuda/compat -I/usr/local/cuda/include"
log build; make build-cuda >$w/build.log 2>&1 || { tail -30 $w/build.log; tar czf $out/all.tgz -C /tmp final; exit 1; }
git rev-parse --short HEAD >$w/commit.txt 2>/dev/null; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >$w/gpu.txt
log offload-gpu-tests
env CGO_ENABLED=1 CGO_CFLAGS="-O2 -I$PWD/runtime/cuda/compat -I/usr/local/cuda/include" CGO_LDFLAGS="-L/usr/local/cuda/lib64 -L/usr/local/cuda/lib64/stubs -Wl,--disable-new-dtags,-rpath,/usr/local/cuda/lib64:/usr/local/nvidia/lib64" \
  timeout 200 go test -tags cuda -count=1 -run GPU -bench GPUUnitGraphsReplan -benchtime 300x -v ./offload/ >$w/offload-gpu.txt 2>&1
grep -E "^(--- |ok|FAIL|Benchmark|PASS)|gpu_cuda_test" $w/offload-gpu.txt
log make-model; $b make-model --shape llama3-8b --out $m >$w/make-model.txt 2>&1
log bench-eager;  $b bench --model $m --device cuda:0 --budgets 0,8GiB --mode decode --context 512 --iters 10 --json >$w/bench-eager.jsonl 2>&1
log bench-graphs; $b bench --model $m --device cuda:0 --budgets 0,8GiB --mode decode --context 512 --iters 10 --unit-graphs --json >$w/bench-graphs.jsonl 2>&1
cat $w/bench-eager.jsonl $w/bench-graphs.jsonl | cut -c1-400
log profile; $b profile --model $m --device cuda:0 --gpu-budget 8GiB --out /tmp/p8 >$w/profile.txt 2>&1
log restart-warm; FT_TRACE=1 $b run-model --model $m --device cuda:0 --profile /tmp/p8 --strict --token-ids $ids --max-new-tokens 1 --json >$w/restart-warm.json 2>$w/restart-warm.err
log cat-warm; /usr/bin/time -f "%e s" cat $m/*.safetensors 2>$w/cat-warm.txt >/dev/null
sync; echo 3 >/proc/sys/vm/drop_caches
log restart-cold; FT_TRACE=1 $b run-model --model $m --device cuda:0 --profile /tmp/p8 --strict --token-ids $ids --max-new-tokens 1 --json >$w/restart-cold.json 2>$w/restart-cold.err
sync; echo 3 >/proc/sys/vm/drop_caches
log cat-cold; /usr/bin/time -f "%e s" cat $m/*.safetensors 2>$w/cat-cold.txt >/dev/null
cat $w/restart-warm.json $w/cat-warm.txt $w/restart-cold.json $w/cat-cold.txt
log test-cuda; timeout 170 make test-cuda >$w/test-cuda.txt 2>&1; echo "test-cuda rc=$?" >>$w/steps.log
grep -E "^(--- FAIL|ok|FAIL|panic)" $w/test-cuda.txt
log done
tar czf $out/all.tgz -C /tmp final
