package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/llama"
	"github.com/flextensor-go/flextensor/models/tokenizer"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/spf13/pflag"
)

func init() {
	register(command{name: "run-model", summary: "generate tokens with a checkpoint (Llama, Qwen2/3, Mistral, Mixtral, Qwen3-MoE; BF16 or FP8)", run: runModel,
		define: func(fs *pflag.FlagSet) { runModelFlags(fs) }})
}

const runModelUsage = `
infer run-model generates tokens with a Hugging Face checkpoint of a family
FlexTensor runs (Llama, Qwen2, Qwen3, Mistral, Mixtral, Qwen3-MoE; BF16 or FP8).
With no --model it runs the tiny model bundled in the binary.

Usage:
  infer run-model [--model DIR] (--prompt TEXT | --token-ids 1,2,3) [flags]

Examples:
  infer run-model --prompt "The license grants"
  infer run-model --model ./Llama-3.1-8B-Instruct --chat --prompt "Name three rivers." --temperature 0.7
  infer run-model --model ./Qwen3-8B --chat --system "Answer in French." --prompt "Name three rivers."
  infer run-model --token-ids 37,235,396 --max-new-tokens 20
  infer run-model --model ./Llama-3.1-8B --token-ids 128000,9906 --temperature 0.7 --top-p 0.9 --seed 1
  infer run-model --token-ids 37,235 --json
  infer run-model --model ./llama3-8b --device cuda:0 --gpu-budget 8GiB --token-ids 128000,9906 --offload-timing
  infer run-model --device cpu --device-memory 1MiB --gpu-budget 0.9 --token-ids 37,235 --offload-timing

--chat renders the prompt with the checkpoint's own chat template
(tokenizer_config.json's chat_template, as transformers' apply_chat_template
does, with the generation prompt) and stops at the template's end tokens
(e.g. <|im_end|>, <|eot_id|>). Only a checkpoint without a chat_template
falls back to the built-in Llama 3 instruct format.

With --temperature > 0 and no --seed, each run draws a seed at random and
prints it ("seed N (drawn at random; --seed N repeats this run)" on stderr,
"seed" in --json); --seed N repeats that run's tokens.
`

type runOptions struct {
	dev         deviceFlags
	prompt      string
	chat        bool
	system      string
	tokenIDs    string
	maxNew      int
	temperature float32
	topK        int
	topP        float32
	seed        uint64
	seedGiven   bool // --seed was given; else a sampled run draws one (randomSeed)
	jsonOut     bool
	ignoreEOS   bool
	batch       batchFlags
}

func runModelFlags(fs *pflag.FlagSet) *runOptions {
	var o runOptions
	fs.StringVar(&o.prompt, "prompt", "", "prompt text (tokenized with the checkpoint's tokenizer.json); the reply streams to stdout")
	fs.BoolVar(&o.chat, "chat", false, "render --prompt as a user message with the checkpoint's chat template (the Llama 3 format when it has none)")
	fs.StringVar(&o.system, "system", "", "with --chat: a system message before the prompt")
	fs.StringVar(&o.tokenIDs, "token-ids", "", "prompt as comma-separated token ids (instead of --prompt)")
	fs.IntVar(&o.maxNew, "max-new-tokens", 32, "most tokens to generate")
	fs.Float32Var(&o.temperature, "temperature", 0, "sampling temperature; 0 = greedy")
	fs.IntVar(&o.topK, "top-k", 0, "sample from the k most likely tokens; 0 = all")
	fs.Float32Var(&o.topP, "top-p", 1, "sample from the smallest set of tokens with this much probability")
	fs.Uint64Var(&o.seed, "seed", 0, "sampling seed (with --temperature > 0); without it each run draws one at random and reports it (stderr, --json \"seed\", a batch result's \"seed\") so --seed N repeats the run")
	fs.BoolVar(&o.jsonOut, "json", false, "print one JSON object instead of text")
	fs.BoolVar(&o.ignoreEOS, "ignore-eos", false, "keep generating after an end-of-sequence token")
	o.dev.register(fs)
	o.batch.register(fs)
	return &o
}

func runModel(args []string, stdout, stderr io.Writer) (err error) {
	fs := newFlags("run-model", runModelUsage, stderr)
	o := runModelFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	o.dev.progress = newProgress(stderr)
	o.seedGiven = fs.Changed("seed")
	if batched, err := maybeRunBatch(o, stdout, stderr); batched {
		return err
	}
	// Ctrl-C stops generation between tokens (and Open between its steps);
	// the deferred Close releases device and pinned memory before the
	// command returns.
	var promptText *string
	if fs.Changed("prompt") {
		promptText = &o.prompt
	}
	if err := checkPromptSource(flagFields, promptText, fs.Changed("token-ids"), strings.TrimSpace(o.tokenIDs) == ""); err != nil {
		return err
	}
	if o.chat && o.prompt == "" {
		return usagef("--chat needs --prompt")
	}
	if o.system != "" && !o.chat {
		return usagef("--system needs --chat")
	}
	var prompt []int32
	if o.tokenIDs != "" {
		if prompt, err = parseTokenIDs(o.tokenIDs); err != nil {
			return err
		}
	}
	if err := checkRequestParams(flagFields, o.maxNew, o.temperature, o.topK, o.topP); err != nil {
		return err
	}
	if err := o.dev.checkOffloadFlags(); err != nil {
		return err
	}
	traceTokens, err := tokenTraceOn()
	if err != nil {
		return err
	}
	start := time.Now()
	sess, err := openSession(o.dev)
	if err != nil {
		return err
	}
	defer func() {
		// Closing checks that every device and pinned byte came back.
		if cerr := sess.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		if sess.bundled {
			err = bundledError(err, sess.Dir)
		}
	}()
	model, backend, dev := sess.Model, sess.Backend, sess.Device
	loadDur := time.Since(start)
	var tok *tokenizer.Tokenizer
	var stops []int32
	if o.prompt != "" {
		if tok, err = loadTokenizer(sess.Dir); err != nil {
			return err
		}
		text, special := o.prompt, true
		if o.chat {
			if text, stops, err = chatPrompt(sess.Dir, tok, o.system, o.prompt); err != nil {
				return err
			}
			special = false // the template writes its own BOS, as apply_chat_template's encoding assumes
		}
		ids, err := tok.Encode(text, special)
		if err != nil {
			return fmt.Errorf("--prompt: %w", err)
		}
		for _, id := range ids {
			prompt = append(prompt, int32(id))
		}
		for i, id := range prompt {
			if int(id) >= model.Cfg.VocabSize {
				return fmt.Errorf("--prompt: the tokenizer (%s) gave id %d at token %d, outside the model's vocabulary [0, %d): tokenizer.json does not match config.json's vocab_size",
					sess.describe("tokenizer.json"), id, i, model.Cfg.VocabSize)
			}
		}
	} else if jsonOut := o.jsonOut; jsonOut {
		// --json prints "text" whenever the checkpoint has a tokenizer.
		if t, err := loadTokenizer(sess.Dir); err == nil {
			tok = t
		}
	}
	if err := checkRequestFits(flagFields, model.Cfg, prompt, o.prompt != "", o.maxNew, stops); err != nil {
		return err
	}
	// Text streams to stdout as tokens are chosen (not with --json).
	var stream *tokenizer.StreamDecoder
	if tok != nil && !o.jsonOut {
		stream = tok.NewStreamDecoder()
	}
	var tt *tokenTracer // FT_TOKEN_TRACE=1
	var onStep func(forward, pick time.Duration)
	if traceTokens {
		var pass []func() offload.PassInfo
		names := sess.Managers // several devices: every rank's manager
		if len(names) == 0 && sess.Manager != "" {
			names = []string{sess.Manager}
		}
		for _, name := range names {
			pass = append(pass, offload.GetOffloadManager(name).LastPass)
		}
		tt = newTokenTracer(stderr, "token", pass...)
		// The first step is the prompt's forward: never steady.
		onStep = func(forward, pick time.Duration) { tt.step(forward, pick, tt.n > 0) }
		tt.start()
	}
	sampled := o.temperature > 0
	if sampled && !o.seedGiven {
		o.seed = randomSeed()
		fmt.Fprintf(stderr, "seed %d (drawn at random; --seed %d repeats this run)\n", o.seed, o.seed)
	}
	start = time.Now()
	var firstToken, firstAt, lastAt time.Duration
	var tokenAt []time.Duration // when each token was chosen, from start
	gen, err := model.Generate(backend, prompt, llama.GenerateOptions{
		OnToken: func(id int32) error {
			lastAt = time.Since(start)
			tokenAt = append(tokenAt, lastAt)
			if firstToken == 0 {
				firstAt = lastAt
				firstToken = time.Since(processStart)
				traceStep("first token", time.Since(start))
				if os.Getenv("FT_TRACE") == "1" { // for timing from exec, before Go starts
					fmt.Fprintf(os.Stderr, "trace: first token at unix %d ns\n", time.Now().UnixNano())
				}
			}
			if err := interrupted(); err != nil {
				return err
			}
			if stream != nil {
				piece, err := stream.Add(int(id))
				if err != nil { // an id the tokenizer does not cover
					piece = "\uFFFD"
				}
				if _, err := io.WriteString(stdout, printable(piece)); err != nil {
					return err
				}
			}
			return nil
		},
		OnStep:       onStep,
		MaxNewTokens: o.maxNew,
		Sampling:     kernels.SampleParams{Temperature: o.temperature, TopK: o.topK, TopP: o.topP},
		Seed:         o.seed,
		IgnoreEOS:    o.ignoreEOS,
		StopTokens:   stops,
	})
	if stream != nil {
		fmt.Fprintln(stdout, printable(stream.Flush()))
	}
	if err != nil {
		return model.ExplainNonFinite(err, sess.Checkpoint)
	}
	genDur := time.Since(start)
	if tt != nil {
		tt.summary()
	}
	if o.dev.offloadTiming {
		defer sess.printTiming(stderr)
	}
	if o.jsonOut {
		out := map[string]any{
			"prompt_ids":    nonNil(prompt),
			"generated_ids": nonNil(gen),
			"device":        dev.Name(),
			"load_ms":       float64(loadDur.Microseconds()) / 1e3,
			"generate_ms":   float64(genDur.Microseconds()) / 1e3,
			// The prompt's forward to the first generated token, then the
			// mean time of each later token (0 with fewer than two).
			"prompt_to_first_token_ms": float64(firstAt.Microseconds()) / 1e3,
			"decode_ms_per_token":      decodePer(firstAt, lastAt, len(gen)),
			// The median time between generated tokens: the steady rate,
			// without the few steps an offloaded model spends profiling,
			// measuring host units or moving units between placements.
			"decode_ms_per_token_median": decodeMedian(tokenAt),
			// From process start to the first generated token, and what the
			// process read and held to get there.
			"first_token_ms":        float64(firstToken.Microseconds()) / 1e3,
			"checkpoint_bytes":      sess.Checkpoint.TotalBytes(),
			"checkpoint_bytes_read": sess.Checkpoint.BytesRead(),
			"peak_rss_bytes":        peakRSS(),
			"pinned_peak_bytes":     dev.HostMemory().Peak,
			"device_peak_bytes":     dev.Memory().Peak,
		}
		if sampled { // the seed the tokens were drawn with
			out["seed"] = o.seed
		}
		out["io_rchar"], out["io_read_bytes"] = ioCounters()
		if st := sess.poolStats(); st.Calls > 0 {
			out["expert_hit_rate"] = st.HitRate()
			out["expert_calls"] = st.Calls
			out["expert_copied_bytes"] = st.CopiedBytes
			out["expert_passes"] = st.Passes
		}
		if tok != nil {
			ids := make([]int, len(gen))
			for i, id := range gen {
				ids[i] = int(id)
			}
			out["text"] = decodeLenient(tok, ids)
		}
		return json.NewEncoder(stdout).Encode(out)
	}
	if stream == nil {
		fmt.Fprintf(stdout, "prompt:    %s\ngenerated: %s\n", joinIDs(prompt), joinIDs(gen))
	}
	fmt.Fprintf(stderr, "%d tokens in %v (%.1f tokens/s) on %s", len(gen), genDur.Round(time.Millisecond),
		float64(len(gen))/genDur.Seconds(), dev.Name())
	if len(gen) > 1 { // the prompt's forward, then the steady decode rate
		fmt.Fprintf(stderr, ": first token after %v, then %.2f ms a token", firstAt.Round(100*time.Microsecond), decodePer(firstAt, lastAt, len(gen)))
		if sess.Manager != "" || len(sess.Managers) > 0 { // offloaded: the first decode steps profile and may replan
			fmt.Fprintf(stderr, " (median %.2f ms)", decodeMedian(tokenAt))
		}
	}
	fmt.Fprintln(stderr)
	if st := sess.poolStats(); st.Calls > 0 {
		fmt.Fprintln(stderr, formatPoolStats(st))
	}
	return nil
}

// randomSeed draws a sampling seed for a run or request given none, so
// that sampled runs differ (as serve's requests do) and the reported seed
// repeats one.
func randomSeed() uint64 { return rand.Uint64() }

// printable replaces the control characters of generated text (escape
// sequences a random or hostile model could emit to a terminal) with U+FFFD,
// keeping newlines and tabs.
func printable(s string) string {
	clean := true
	for _, r := range s {
		if unicode.IsControl(r) && r != '\n' && r != '\t' {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) && r != '\n' && r != '\t' {
			return unicode.ReplacementChar
		}
		return r
	}, s)
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

// decodePer is the mean time of each generated token after the first (ms).
func decodePer(firstAt, lastAt time.Duration, n int) float64 {
	if n < 2 {
		return 0
	}
	return float64((lastAt - firstAt).Microseconds()) / 1e3 / float64(n-1)
}

// decodeMedian is the median gap between consecutive generated tokens in
// ms, given when each was chosen (0 with fewer than two). An offloaded
// model's first decode steps run its profiling passes, its host-unit
// measuring and replans, which the mean (decodePer) spreads over a short
// generation; the median is the rate once its plan is settled.
func decodeMedian(at []time.Duration) float64 {
	if len(at) < 2 {
		return 0
	}
	gaps := make([]float64, len(at)-1)
	for i := range gaps {
		gaps[i] = float64((at[i+1] - at[i]).Microseconds()) / 1e3
	}
	return medianOf(gaps)
}
