# FlexTensor for Go. `make run` generates with the bundled tiny model on the
# CPU; `make test` is what CI runs.
GO      ?= go
BIN     ?= bin
PROMPT  ?= The quick brown fox

.PHONY: build run test bench fuzz clean build-cuda test-cuda bench-cuda

build:
	$(GO) build -o $(BIN)/infer ./cmd/infer

run:
	$(GO) run ./cmd/infer run-model --prompt "$(PROMPT)" --max-new-tokens 24

test:
	$(GO) vet ./...
	$(GO) test -race -timeout 30m ./...
	$(GO) test -count=1 -run '^TestLoad$$' ./serve/
	$(GO) test -count=1 -run '^TestTrainedFP8Agreement$$' ./models/all/

# CPU benchmarks (times are only meaningful on a quiet machine).
bench:
	$(GO) test -run '^$$' -bench . -benchtime 2x ./kernels/ ./models/llama/

# Run each fuzz target for FUZZTIME (seed corpora already run in `make test`).
FUZZTIME ?= 60s
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzSafetensorsHeader -fuzztime $(FUZZTIME) ./loader/
	$(GO) test -run '^$$' -fuzz FuzzConfig -fuzztime $(FUZZTIME) ./models/llama/
	$(GO) test -run '^$$' -fuzz FuzzShardIndex -fuzztime $(FUZZTIME) ./loader/
	$(GO) test -run '^$$' -fuzz FuzzProfile -fuzztime $(FUZZTIME) ./offload/
	$(GO) test -run '^$$' -fuzz FuzzTokenizerJSON -fuzztime $(FUZZTIME) ./models/tokenizer/
	$(GO) test -run '^$$' -fuzz FuzzRoundTrip -fuzztime $(FUZZTIME) ./models/tokenizer/
	$(GO) test -run '^$$' -fuzz FuzzDecodeRequest -fuzztime $(FUZZTIME) ./serve/

# CUDA builds (build tag cuda): the CUDA toolkit at CUDA_HOME and an NVIDIA
# driver. runtime/cuda/compat comes first on the include path so that
# gorgonia.org/cu compiles against CUDA 13 headers; the rpath finds cuBLAS and
# NVRTC (and NVRTC its builtins) at run time.
CUDA_HOME ?= /usr/local/cuda
CUDA_ENV = CGO_ENABLED=1 \
	CGO_CFLAGS="-O2 -g -I$(CURDIR)/runtime/cuda/compat -I$(CUDA_HOME)/include" \
	CGO_LDFLAGS="-L$(CUDA_HOME)/lib64 -L$(CUDA_HOME)/lib64/stubs -Wl,--disable-new-dtags,-rpath,$(CUDA_HOME)/lib64:/usr/local/nvidia/lib64" \
	LD_LIBRARY_PATH="$(CUDA_HOME)/lib64:/usr/local/nvidia/lib64:$$LD_LIBRARY_PATH"
CUDA_PKGS = ./runtime/cuda/... ./internal/... ./kernels/... ./models/... ./cmd/infer/... ./offload/... ./session/...
BENCHTIME ?= 20x

# Then the kernels are compiled once for this machine's GPU into
# $(BIN)/kernels, which the binary reads before compiling with NVRTC (a
# build machine without a GPU skips this; the first run compiles and caches).
build-cuda:
	$(CUDA_ENV) $(GO) build -tags cuda -o $(BIN)/infer-cuda ./cmd/infer
	$(CUDA_ENV) $(BIN)/infer-cuda kernels --out $(BIN)/kernels || echo "build-cuda: kernels not compiled ahead of time (no usable GPU?); the first run compiles them"

# Every kernel against the CPU reference, the tiny-llama golden test on the
# GPU, greedy generation through infer run-model --device cuda:0, bad input.
test-cuda:
	$(CUDA_ENV) $(GO) vet -tags cuda ./...
	$(CUDA_ENV) $(GO) test -tags cuda -count=1 -timeout 20m $(CUDA_PKGS)

# NCCL and the sharded model over every visible GPU (issue 19): on one GPU
# the NCCL path runs with one rank and the several-GPU test skips.
test-multigpu:
	$(CUDA_ENV) $(GO) test -tags cuda -count=1 -timeout 10m -v -run 'TestNCCL|TestSharded' ./runtime/cuda/ ./session/

# Resident Llama-3-8B-shaped benchmarks on GPU 0 (weights made on the device).
bench-cuda:
	$(CUDA_ENV) $(GO) test -tags cuda -run '^$$' -bench . -benchtime $(BENCHTIME) -timeout 20m ./bench/

clean:
	rm -rf $(BIN)
