# FlexTensor for Go. `make run` generates with the bundled tiny model on the
# CPU; `make test` is what CI runs.
GO      ?= go
BIN     ?= bin
PROMPT  ?= 37,235,396,72,255,393,203,133,335,448,144,129

.PHONY: build run test bench fuzz clean

build:
	$(GO) build -o $(BIN)/infer ./cmd/infer

run:
	$(GO) run ./cmd/infer run-model --token-ids $(PROMPT) --max-new-tokens 20

test:
	$(GO) vet ./...
	$(GO) test -race ./...

# CPU benchmarks (times are only meaningful on a quiet machine).
bench:
	$(GO) test -run '^$$' -bench . -benchtime 2x ./kernels/ ./models/llama/

# Run each fuzz target for FUZZTIME (seed corpora already run in `make test`).
FUZZTIME ?= 60s
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzSafetensorsHeader -fuzztime $(FUZZTIME) ./loader/
	$(GO) test -run '^$$' -fuzz FuzzLlamaConfig -fuzztime $(FUZZTIME) ./loader/

clean:
	rm -rf $(BIN)
