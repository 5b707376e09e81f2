# Shared helpers of the GPU-call scripts (bench/h200-*.sh), sourced after
# `out` is set. The earlier scripts carry their own copies: each is the
# record of a call that ran at a given commit, so they stay as they ran.
#
#   log MSG                       a timestamped step line (steps.log)
#   left [SECONDS]                true while the call is under SECONDS (default $BUDGET or 500)
#   build_cuda                    make build-cuda (BUILD_T: timeout, default 280 s), or the log's tail and exit
#   test_env                      cgo flags to compile cuda-tagged test binaries
#   compile_tests PKG...          go test -c each package to /tmp/t/<base>.test (background; wait)
#   make_models                   /tmp/llama3-8b (context raised to 40,960) if missing
#   make_fp8                      /tmp/llama3-8b-fp8 ($f8; per-channel FP8, make-model-fp8.txt) if missing
#   runt TAG BIN DIR REGEX        one test binary run; a line in tests.txt (TT: timeout, default 120 s)
#   one TAG ENV... -- ARGS        one `infer bench` run; its rows in summary.txt
#   rmodel TAG ENV... -- ARGS     one `run-model` of the 12 fixed token ids (ARGS: --max-new-tokens …); its last line in summary.txt
#   hyb TAG ENV...                one hybrid `infer bench` (budgets $HB, default 0,8GiB; more flags $HX; FT_TRACE on); its rows,
#                                 host unit time and timed-forward lines in summary.txt (HT: timeout, LEFT: skip after)
#   peer_build                    llama.cpp's llama-bench from .peer/llamacpp.tar.xz into /tmp/lc/build/bin (run it in the
#                                 background; "peer build rc=N" in summary.txt). .peer/ holds the source archive and
#                                 tok/ (the Llama 3 tokenizer): see ../shared/peers/peer_llamacpp.sh for how to make them
#   smi_start / smi_stop          nvidia-smi samples the SM clock, power and throttle reasons every 200 ms into smi.txt;
#                                 smi_stop ends it and puts the clocks' histogram and the loaded samples' means into
#                                 summary.txt (the clocks a long load holds under the power cap: s37c, s37d)
#   finish                        tar the call's outputs into all.tgz
#   start_call PKG...             the usual start: compile_tests PKG... (background), build_cuda, FT_KERNEL_CACHE,
#                                 make_models (background), wait for all
#   tests_done                    tests.txt and the failures' context into summary.txt; false if any test failed,
#                                 panicked or timed out (then: tests_done || { finish; exit 0; })
t0=$(date +%s)
b=bin/infer-cuda
m=/tmp/llama3-8b
f8=/tmp/llama3-8b-fp8
log() { echo "== $(date +%T) +$(( $(date +%s) - t0 ))s $*" | tee -a "$out/steps.log"; }
left() { [ $(( $(date +%s) - t0 )) -lt ${1:-${BUDGET:-500}} ]; }
build_cuda() {  # BUILD_T seconds (default 280: a fresh machine's build ran past 170 in s23b)
  log build
  timeout ${BUILD_T:-280} make build-cuda >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; finish; exit 1; }
}
test_env() {
  local R=$PWD C=/usr/local/cuda
  export CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -I$R/runtime/cuda/compat -I$C/include" \
    CGO_LDFLAGS="-L$C/lib64 -L$C/lib64/stubs -Wl,--disable-new-dtags,-rpath,$C/lib64:/usr/local/nvidia/lib64" \
    LD_LIBRARY_PATH="$C/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}"
}
compile_tests() {
  mkdir -p /tmp/t; test_env
  local p
  for p in "$@"; do
    (timeout 170 go test -tags cuda -c -o /tmp/t/$(basename $p).test ./$p >"$out/compile-$(basename $p).log" 2>&1) &
  done
}
make_models() {
  [ -d $m ] && return
  timeout ${MT:-120} $b make-model --shape llama3-8b --out $m >"$out/make-model.txt" 2>&1
  sed -i 's/"max_position_embeddings": 8192/"max_position_embeddings": 40960/' $m/config.json
}
make_fp8() {
  [ -d $f8 ] && return
  timeout ${MT:-240} $b make-model --shape llama3-8b --dtype fp8-channel --out $f8 >"$out/make-model-fp8.txt" 2>&1
}
runt() { # tag binary dir regex
  (cd $3 && timeout ${TT:-120} /tmp/t/$2.test -test.count=1 -test.v -test.run "$4" >"$out/test-$1.log" 2>&1); local rc=$?
  echo "test $1 rc=$rc: $(grep -cE '^\s*--- PASS' "$out/test-$1.log") passed, $(grep -cE '^\s*--- FAIL' "$out/test-$1.log") failed, last: $(grep -E '^=== RUN' "$out/test-$1.log" | tail -1)" >>"$out/tests.txt"
}
one() { # tag env... -- bench args
  left || { echo "$1: skipped (time)" | tee -a "$out/summary.txt"; return; }
  local tag=$1; shift; local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  local f="$out/$tag.txt"
  env "${envs[@]}" timeout ${BT:-90} $b bench --device cuda:0 "$@" >"$f" 2>&1
  local r g k
  r=$(grep -E '^(resident|0 |8GiB|budget)' "$f" | awk '{printf "row: %s | ", $0}' | tr -s ' ')
  g=$(grep -E 'replayed|greedy generation' "$f" | sed -e 's/.*device: /graph /' -e 's/.*loop): /generate /' | tr '\n' ' ')
  k=$(grep -E '^attn_' "$f" | awk '{printf "%s %s ms; ", $1, $3}')
  echo "$tag: $r $g $k" | tee -a "$out/summary.txt"
}
rmodel() { # tag env... -- run-model args
  left || { echo "run-model $1: skipped (time)" | tee -a "$out/summary.txt"; return; }
  local tag=$1; shift; local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" timeout ${RT:-60} $b run-model --model $m --device cuda:0 \
    --token-ids 37,235,396,72,255,393,203,133,335,448,144,129 --ignore-eos "$@" >"$out/rm-$tag.txt" 2>&1
  tail -1 "$out/rm-$tag.txt" | sed "s/^/run-model $tag: /" | tee -a "$out/summary.txt"
}
hyb() { # tag env...
  left ${LEFT:-${BUDGET:-500}} || { echo "hyb $1: skipped (time)" | tee -a "$out/summary.txt"; return; }
  local tag=$1; shift; log "hyb $tag"
  env FT_TRACE=1 "$@" timeout ${HT:-150} $b bench --device cuda:0 --model $m --budgets ${HB:-0,8GiB} --mode decode --iters ${HI:-10} --host-threads 16 ${HX:-} >"$out/hyb-$tag.txt" 2>&1
  echo "hyb $tag: $(grep -E '^(0\+host|8GiB\+host)' "$out/hyb-$tag.txt" | tr -s ' ' | tr '\n' '|') $(grep -o 'host unit measured [0-9.]* ms' "$out/hyb-$tag.txt" | tr '\n' ' ')" | tee -a "$out/summary.txt"
}
peer_build() {
  local o; o=$(cd "$out" && pwd)  # the build runs in /tmp/lc: logs by absolute path
  ( rm -rf /tmp/lc && mkdir -p /tmp/lc && tar xJf "$PWD/.peer/llamacpp.tar.xz" -C /tmp/lc && cd /tmp/lc &&
    mkdir -p tests pocs && touch tests/CMakeLists.txt pocs/CMakeLists.txt &&
    cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
      -DCMAKE_BUILD_TYPE=Release >"$o/peer-cfg.log" 2>&1 &&
    cmake --build build --target llama-bench -j16 >"$o/peer-build.log" 2>&1 )
  local rc=$?; echo "peer build rc=$rc" >>"$out/summary.txt"; log peer-built; return $rc
}
smi_start() {
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
    --format=csv -lms 200 >"$out/smi.txt" 2>&1 &
  smi_pid=$!
}
smi_stop() {
  kill "${smi_pid:-}" 2>/dev/null
  awk -F', ' 'NR>1 {print $2, $6}' "$out/smi.txt" | sort | uniq -c | sort -rn | head -12 >>"$out/summary.txt"
  awk -F', ' 'NR>1 && $4+0 > 650 {n++; c+=$2; p+=$4} END {if (n) printf "loaded samples (over 650 W): %d, mean SM clock %.0f MHz, mean power %.1f W\n", n, c/n, p/n}' \
    "$out/smi.txt" >>"$out/summary.txt"
}
finish() { log done; (cd "$out" && tar czf all.tgz *.txt *.log 2>/dev/null); true; }
start_call() {
  [ $# -gt 0 ] && compile_tests "$@"
  build_cuda
  export FT_KERNEL_CACHE=$PWD/bin/kernels
  (MT=${MT:-240} make_models) &
  wait
}
tests_done() {
  [ -f "$out/tests.txt" ] || return 0
  tee -a "$out/summary.txt" <"$out/tests.txt"
  grep -h -B2 -A12 -- '--- FAIL' "$out"/test-*.log 2>/dev/null | head -40 | tee -a "$out/summary.txt"
  ! grep -q -- '--- FAIL\|panic\|timed out' "$out"/test-*.log 2>/dev/null
}
