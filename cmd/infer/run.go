package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/llama"
)

func init() {
	register(command{name: "run-model", summary: "generate tokens with a Llama checkpoint", run: runModel})
}

const runModelUsage = `
infer run-model generates tokens with a Hugging Face Llama checkpoint.
With no --model it runs the tiny model bundled in the binary.

Usage:
  infer run-model [--model DIR] --token-ids 1,2,3 [flags]

Examples:
  infer run-model --token-ids 37,235,396 --max-new-tokens 20
  infer run-model --model ./Llama-3.1-8B --token-ids 128000,9906 --temperature 0.7 --top-p 0.9 --seed 1
  infer run-model --token-ids 37,235 --json
  infer run-model --model ./llama3-8b --device cuda:0 --gpu-budget 8GiB --token-ids 128000,9906 --offload-timing
  infer run-model --device cpu --device-memory 1MiB --gpu-budget 0.9 --token-ids 37,235 --offload-timing
`

type runOptions struct {
	dev         deviceFlags
	tokenIDs    string
	maxNew      int
	temperature float32
	topK        int
	topP        float32
	seed        uint64
	jsonOut     bool
	ignoreEOS   bool
}

func runModel(args []string, stdout, stderr io.Writer) error {
	var o runOptions
	fs := newFlags("run-model", runModelUsage, stderr)
	fs.StringVar(&o.tokenIDs, "token-ids", "", "prompt as comma-separated token ids (required)")
	fs.IntVar(&o.maxNew, "max-new-tokens", 32, "most tokens to generate")
	fs.Float32Var(&o.temperature, "temperature", 0, "sampling temperature; 0 = greedy")
	fs.IntVar(&o.topK, "top-k", 0, "sample from the k most likely tokens; 0 = all")
	fs.Float32Var(&o.topP, "top-p", 1, "sample from the smallest set of tokens with this much probability")
	fs.Uint64Var(&o.seed, "seed", 0, "sampling seed")
	fs.BoolVar(&o.jsonOut, "json", false, "print one JSON object instead of text")
	fs.BoolVar(&o.ignoreEOS, "ignore-eos", false, "keep generating after an end-of-sequence token")
	o.dev.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	prompt, err := parseTokenIDs(o.tokenIDs)
	if err != nil {
		return err
	}
	if o.maxNew < 0 {
		return usagef("--max-new-tokens %d is negative", o.maxNew)
	}
	if o.temperature < 0 || o.topK < 0 || o.topP < 0 || o.topP > 1 {
		return usagef("sampling flags out of range: --temperature %g (≥ 0), --top-k %d (≥ 0), --top-p %g (in [0,1])", o.temperature, o.topK, o.topP)
	}
	start := time.Now()
	sess, err := openSession(o.dev)
	if err != nil {
		return err
	}
	defer sess.Close()
	model, backend, dev := sess.model, sess.backend, sess.dev
	loadDur := time.Since(start)
	for i, id := range prompt {
		if int(id) >= model.Cfg.VocabSize {
			return usagef("--token-ids: id %d at position %d is outside the vocabulary [0, %d)", id, i, model.Cfg.VocabSize)
		}
	}
	start = time.Now()
	gen, err := model.Generate(backend, prompt, llama.GenerateOptions{
		MaxNewTokens: o.maxNew,
		Sampling:     kernels.SampleParams{Temperature: o.temperature, TopK: o.topK, TopP: o.topP},
		Seed:         o.seed,
		IgnoreEOS:    o.ignoreEOS,
	})
	if err != nil {
		return err
	}
	genDur := time.Since(start)
	if o.dev.offloadTiming {
		defer sess.printTiming(stderr)
	}
	if o.jsonOut {
		return json.NewEncoder(stdout).Encode(map[string]any{
			"prompt_ids":    nonNil(prompt),
			"generated_ids": nonNil(gen),
			"device":        dev.Name(),
			"load_ms":       float64(loadDur.Microseconds()) / 1e3,
			"generate_ms":   float64(genDur.Microseconds()) / 1e3,
		})
	}
	fmt.Fprintf(stdout, "prompt:    %s\ngenerated: %s\n", joinIDs(prompt), joinIDs(gen))
	fmt.Fprintf(stderr, "%d tokens in %v (%.1f tokens/s) on %s\n", len(gen), genDur.Round(time.Millisecond),
		float64(len(gen))/genDur.Seconds(), dev.Name())
	return nil
}

func nonNil(ids []int32) []int32 {
	if ids == nil {
		return []int32{}
	}
	return ids
}

// parseTokenIDs reads "1,2,3".
func parseTokenIDs(s string) ([]int32, error) {
	if strings.TrimSpace(s) == "" {
		return nil, usagef("--token-ids is required (comma-separated token ids, e.g. --token-ids 1,2,3)")
	}
	var out []int32
	for i, part := range strings.Split(s, ",") {
		v, err := strconv.ParseInt(strings.TrimSpace(part), 10, 32)
		if err != nil || v < 0 {
			return nil, usagef("--token-ids: item %d (%q) is not a non-negative integer", i, part)
		}
		out = append(out, int32(v))
	}
	return out, nil
}

func joinIDs(ids []int32) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(int(id))
	}
	return strings.Join(parts, ",")
}
