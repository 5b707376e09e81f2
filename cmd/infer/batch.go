package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/models/generate"
	"github.com/flextensor-go/flextensor/models/kvcache"
	"github.com/flextensor-go/flextensor/models/tokenizer"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/spf13/pflag"
)

// batchFlags are run-model's flags for many requests at once.
type batchFlags struct {
	file, out      string
	maxSeqs        int
	maxBatchTokens int
	swapSpace      string // --swap-space: generate.Options.SwapBytes ("" the default)
}

func (f *batchFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.file, "batch-file", "", "run many requests batched: a JSON object per line with prompt or token_ids, and optionally max_new_tokens, temperature, top_k, top_p, seed, stop_token_ids, ignore_eos (defaults: the flags; each line is checked as the flags are, a bad one gets an error result naming its line and field)")
	fs.StringVar(&f.out, "out", "", "with --batch-file: write a JSON result per line here (default stdout)")
	fs.IntVar(&f.maxSeqs, "max-seqs", 256, "with --batch-file: most requests in one forward")
	fs.IntVar(&f.maxBatchTokens, "max-batch-tokens", 512, "with --batch-file: most tokens in one forward (long prompts are prefilled in chunks between decode steps)")
	fs.StringVar(&f.swapSpace, "swap-space", "", "with --batch-file: "+swapSpaceHelp)
}

// batchLine is one line of a batch file; absent fields take the flags'
// values.
type batchLine struct {
	Prompt       *string  `json:"prompt"`
	TokenIDs     []int32  `json:"token_ids"`
	MaxNewTokens *int     `json:"max_new_tokens"`
	Temperature  *float32 `json:"temperature"`
	TopK         *int     `json:"top_k"`
	TopP         *float32 `json:"top_p"`
	Seed         *uint64  `json:"seed"`
	StopTokenIDs []int32  `json:"stop_token_ids"`
	IgnoreEOS    *bool    `json:"ignore_eos"`
}

// batchResult is one line of the results.
type batchResult struct {
	Index        int     `json:"index"` // the request's place in the batch file, from 0
	Line         int     `json:"line"`  // its line number, from 1
	PromptIDs    []int32 `json:"prompt_ids"`
	GeneratedIDs []int32 `json:"generated_ids"`
	Text         *string `json:"text,omitempty"`
	Seed         *uint64 `json:"seed,omitempty"` // a sampled request's seed (the line's, --seed's, or drawn at random)
	FinishReason string  `json:"finish_reason"`
	Error        string  `json:"error,omitempty"`
}

// batchRequest is a parsed line: a request, or why it cannot run.
type batchRequest struct {
	line int
	text *string // a prompt to tokenize
	req  generate.Request
	err  error
}

// readBatchFile parses the batch file: a request per non-blank line. A line
// that does not parse becomes a request with an error naming the line; the
// others are unharmed.
func readBatchFile(path string, o *runOptions) ([]batchRequest, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, usagef("--batch-file: %v", err)
	}
	var out []batchRequest
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	for n := 1; sc.Scan(); n++ {
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		r := batchRequest{line: n}
		r.req, r.text, r.err = parseBatchLine(text, o)
		if r.err != nil {
			r.err = fmt.Errorf("%s line %d: %w", path, n, r.err)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--batch-file %s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, usagef("--batch-file %s has no requests (want a JSON object per line)", path)
	}
	return out, nil
}

func parseBatchLine(text []byte, o *runOptions) (generate.Request, *string, error) {
	var l batchLine
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return generate.Request{}, nil, fmt.Errorf("not a request object: %v", err)
	}
	if dec.More() {
		return generate.Request{}, nil, errors.New("more than one JSON value on the line")
	}
	if err := checkPromptSource(lineFields, l.Prompt, l.TokenIDs != nil, len(l.TokenIDs) == 0); err != nil {
		return generate.Request{}, nil, err
	}
	r := generate.Request{Prompt: l.TokenIDs, MaxNewTokens: o.maxNew, Seed: o.seed, IgnoreEOS: o.ignoreEOS, StopTokens: l.StopTokenIDs,
		Sampling: kernels.SampleParams{Temperature: o.temperature, TopK: o.topK, TopP: o.topP}}
	if l.MaxNewTokens != nil {
		r.MaxNewTokens = *l.MaxNewTokens
	}
	if l.Temperature != nil {
		r.Sampling.Temperature = *l.Temperature
	}
	if l.TopK != nil {
		r.Sampling.TopK = *l.TopK
	}
	if l.TopP != nil {
		r.Sampling.TopP = *l.TopP
	}
	if l.Seed != nil {
		r.Seed = *l.Seed
	} else if !o.seedGiven && r.Sampling.Temperature > 0 {
		r.Seed = randomSeed() // reported in the result line
	}
	if l.IgnoreEOS != nil {
		r.IgnoreEOS = *l.IgnoreEOS
	}
	// The checks run-model's flags get (the flags' own values were
	// checked before the file was read).
	if err := checkRequestParams(lineFields, r.MaxNewTokens, r.Sampling.Temperature, r.Sampling.TopK, r.Sampling.TopP); err != nil {
		return generate.Request{}, nil, err
	}
	return r, l.Prompt, nil
}

// kvCacheBlocks sizes the paged cache: --kv-cache as bytes or a fraction of
// the device's memory limit, else blocks for every request at once (at
// most a quarter of a device that has a limit).
func kvCacheBlocks(flag string, m *decoder.Model, b kernels.Backend, reqs []batchRequest) (int, error) {
	cfg := m.PagedConfig(0, 0)
	limit := b.Device().Memory().Limit
	if flag == "" {
		bs := kvcache.DefaultBlockSize
		n := 0
		ctx := m.Cfg.MaxPositionEmbeddings
		for _, r := range reqs {
			if r.err == nil && len(r.req.Prompt) <= ctx {
				positions := len(r.req.Prompt) + max(min(r.req.MaxNewTokens, ctx-len(r.req.Prompt)+1), 1) - 1
				n += (positions + bs - 1) / bs
			}
		}
		if limit > 0 {
			n = min(n, cfg.BlocksForBudget(limit/4, b.ActDType()))
		}
		return max(n, 1), nil
	}
	return kvCacheBlocksFromFlag(flag, m, b)
}

// kvCacheBlocksFromFlag is the number of KV blocks a --kv-cache value (bytes
// or a fraction of the device's memory limit) holds for m; run-model
// --batch-file and serve share it.
func kvCacheBlocksFromFlag(flag string, m *decoder.Model, b kernels.Backend) (int, error) {
	cfg := m.PagedConfig(0, 0)
	per := cfg.BlockBytes(b.ActDType())
	limit := b.Device().Memory().Limit
	budget, err := offload.ParseBudget(flag)
	if err != nil {
		return 0, usageError{fmt.Errorf("--kv-cache: %w", err)}
	}
	bytes := budget.Bytes
	if budget.Fraction > 0 {
		if limit <= 0 {
			return 0, usagef("--kv-cache %s: %s has no memory limit to take a fraction of; give bytes (512MiB)", flag, b.Device().Name())
		}
		bytes = int64(budget.Fraction * float64(limit))
	}
	n := cfg.BlocksForBudget(bytes, b.ActDType())
	if n == 0 {
		return 0, usagef("--kv-cache %s holds no KV block (a block of %d positions takes %s for this model)", flag, kvcache.DefaultBlockSize, runtime.FormatBytes(per))
	}
	return n, nil
}

// maybeRunBatch runs run-model --batch-file when the flag is given
// (reporting true), and refuses the batch flags without it.
func maybeRunBatch(o *runOptions, stdout, stderr io.Writer) (bool, error) {
	if o.batch.file == "" {
		if o.batch.out != "" || o.dev.kvCache != "" || o.batch.swapSpace != "" {
			return true, usagef("--out, --kv-cache and --swap-space apply with --batch-file only")
		}
		return false, nil
	}
	return true, runBatch(o, stdout, stderr)
}

// runBatch is run-model --batch-file: every request of the file through
// one scheduler, results written as JSON lines in the file's order.
func runBatch(o *runOptions, stdout, stderr io.Writer) (err error) {
	f := o.batch
	switch {
	case o.prompt != "" || o.tokenIDs != "":
		return usagef("--batch-file takes its prompts from the file; leave out --prompt and --token-ids")
	case o.chat || o.system != "":
		return usagef("--chat and --system do not apply to --batch-file")
	case o.jsonOut:
		return usagef("--batch-file always writes JSON lines; leave out --json")
	case f.maxSeqs <= 0 || f.maxBatchTokens <= 0:
		return usagef("--max-seqs %d and --max-batch-tokens %d must be positive", f.maxSeqs, f.maxBatchTokens)
	}
	if _, _, err := parseSwapSpace(f.swapSpace); err != nil {
		return err
	}
	// The flags give every line's defaults: checked as run-model checks them.
	if err := checkRequestParams(flagFields, o.maxNew, o.temperature, o.topK, o.topP); err != nil {
		return err
	}
	reqs, err := readBatchFile(f.file, o)
	if err != nil {
		return err
	}
	out := stdout
	if f.out != "" && f.out != "-" {
		file, err := os.Create(f.out)
		if err != nil {
			return usagef("--out: %v", err)
		}
		defer func() {
			if cerr := file.Close(); err == nil {
				err = cerr
			}
		}()
		out = file
	}
	ctx := cmdCtx // cancelled by SIGINT/SIGTERM (runMain)
	sess, err := openSession(o.dev)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := sess.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	m, b := sess.Model, sess.Backend
	var tok *tokenizer.Tokenizer
	tok, tokErr := loadTokenizer(sess.Dir)
	if tokErr != nil {
		tok = nil
	}
	for i := range reqs {
		r := &reqs[i]
		if r.err != nil {
			continue
		}
		if r.text != nil {
			if tok == nil {
				r.err = fmt.Errorf("line %d: %w", r.line, tokErr)
				continue
			}
			ids, err := tok.Encode(*r.text, true)
			if err != nil {
				r.err = fmt.Errorf("line %d: prompt: %w", r.line, err)
				continue
			}
			r.req.Prompt = make([]int32, len(ids))
			for j, id := range ids {
				r.req.Prompt[j] = int32(id)
			}
		}
		// As run-model checks --token-ids or --prompt and --max-new-tokens.
		if err := checkRequestFits(lineFields, m.Cfg, r.req.Prompt, r.text != nil, r.req.MaxNewTokens, r.req.StopTokens); err != nil {
			r.err = fmt.Errorf("%s line %d: %w", f.file, r.line, err)
		}
	}
	blocks, err := kvCacheBlocks(o.dev.kvCache, m, b, reqs)
	if err != nil {
		return err
	}
	cache, err := m.NewPagedCache(b, blocks, 0)
	if err != nil {
		return fmt.Errorf("--kv-cache: %w", err)
	}
	defer cache.Close()
	swap, err := swapSpaceBytes(f.swapSpace, b.Device(), cache.Bytes())
	if err != nil {
		return err
	}
	sched, err := generate.New(m, b, cache, generate.Options{MaxSeqs: f.maxSeqs, MaxBatchTokens: f.maxBatchTokens, MaxQueue: len(reqs), SwapBytes: swap})
	if err != nil {
		return err
	}
	defer sched.Close() // frees solo mode's cache and graph before the paged cache goes
	handles := make([]*generate.Handle, len(reqs))
	// When each request's first and last tokens came: its decode rate.
	firstAt, lastAt := make([]time.Time, len(reqs)), make([]time.Time, len(reqs))
	for i := range reqs {
		r := &reqs[i]
		if r.err != nil {
			continue
		}
		q := r.req
		q.OnToken = func(int32) {
			now := time.Now()
			if firstAt[i].IsZero() {
				firstAt[i] = now
			}
			lastAt[i] = now
		}
		if handles[i], err = sched.Submit(q); err != nil {
			r.err = fmt.Errorf("line %d: %w%s", r.line, err, kvCacheHint(err))
		}
	}
	start := time.Now()
	total := int64(len(reqs))
	finished := func() int64 {
		n := int64(0)
		for _, h := range handles {
			if h == nil { // refused: finished
				n++
				continue
			}
			select {
			case <-h.Done():
				n++
			default:
			}
		}
		return n
	}
	o.dev.progress.update("requests", finished(), total)
	var runErr error
	for {
		if ctx.Err() != nil {
			sched.CancelAll()
			runErr = errInterrupted
		}
		more, err := sched.Step()
		o.dev.progress.update("requests", finished(), total)
		if err != nil {
			runErr = err
			break
		}
		if !more || runErr != nil {
			break
		}
	}
	dur := time.Since(start)
	// Write every line, in the file's order.
	enc := json.NewEncoder(out)
	var failed, tokens int
	for i, r := range reqs {
		res := batchResult{Index: i, Line: r.line, PromptIDs: nonNil(r.req.Prompt), GeneratedIDs: []int32{}}
		if r.err == nil && r.req.Sampling.Temperature > 0 {
			seed := r.req.Seed
			res.Seed = &seed
		}
		switch h := handles[i]; {
		case r.err != nil:
			res.FinishReason, res.Error = string(generate.FinishError), r.err.Error()
		default:
			select {
			case <-h.Done():
				g := h.Wait()
				res.GeneratedIDs, res.FinishReason = g.Generated, string(g.Finish)
				if g.Err != nil {
					res.Error = g.Err.Error()
				}
			default: // a forward failed and the run stopped
				res.FinishReason, res.Error = string(generate.FinishError), "not run: "+runErr.Error()
			}
		}
		tokens += len(res.GeneratedIDs)
		if res.FinishReason == string(generate.FinishError) {
			failed++
		}
		if tok != nil && res.Error == "" {
			ids := make([]int, len(res.GeneratedIDs))
			for j, id := range res.GeneratedIDs {
				ids[j] = int(id)
			}
			if text, err := tok.Decode(ids, true); err == nil {
				res.Text = &text
			}
		}
		if err := enc.Encode(res); err != nil {
			return err
		}
	}
	preempted := swapReport(sched.Preemptions(), sched.Swaps())
	if err := sched.SwapErr(); err != nil {
		preempted += fmt.Sprintf(" (%d swap-outs failed and were recomputed, the first: %v)", sched.SwapFailures(), err)
	}
	if err := sched.SoloErr(); err != nil {
		preempted += fmt.Sprintf(" (%d requests could not step alone through a captured graph and ran batched, the first: %v)", sched.SoloFailures(), err)
	}
	fmt.Fprintf(stderr, "%d requests, %d tokens in %v (%.1f tokens/s) on %s, KV cache %d blocks (%s)%s%s%s\n", len(reqs), tokens,
		dur.Round(time.Millisecond), float64(tokens)/dur.Seconds(), sess.Device.Name(), blocks, runtime.FormatBytes(cache.Bytes()), preempted,
		batchDecodeReport(handles, firstAt, lastAt, start), graphStepReport(sched.GraphSteps()))
	if runErr != nil {
		return runErr
	}
	if failed > 0 {
		where := "stdout"
		if out != stdout {
			where = f.out
		}
		return fmt.Errorf("%d of %d requests failed (their result lines in %s say why)", failed, len(reqs), where)
	}
	return nil
}

// batchDecodeReport is the decode rate of a batch run, comparable with
// run-model's "then X ms a token": for each request with two tokens or
// more, the time from its first token to its last over its tokens but
// the first; with one such request ", first token after T, then X ms a
// token", with several the mean of theirs (", decode X ms a token, the
// mean of N requests"); "" with none.
func batchDecodeReport(handles []*generate.Handle, firstAt, lastAt []time.Time, start time.Time) string {
	var sum, per float64
	n, one := 0, -1
	for i, h := range handles {
		if h == nil || firstAt[i].IsZero() {
			continue
		}
		select {
		case <-h.Done():
		default:
			continue // not run to its end (a forward failed)
		}
		k := len(h.Wait().Generated)
		if k < 2 {
			continue
		}
		per = decodePer(firstAt[i].Sub(start), lastAt[i].Sub(start), k)
		sum += per
		n, one = n+1, i
	}
	switch {
	case n == 0:
		return ""
	case n == 1:
		return fmt.Sprintf(", first token after %v, then %.2f ms a token", firstAt[one].Sub(start).Round(100*time.Microsecond), per)
	default:
		return fmt.Sprintf(", decode %.2f ms a token, the mean of %d requests", sum/float64(n), n)
	}
}

// graphStepReport names the scheduler's graph steps (solo mode), if
// any.
func graphStepReport(n int64) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", %d steps replayed a captured graph", n)
}

// kvCacheHint is what the CLI adds to a scheduler error that a larger KV
// cache would cure: the flag that sizes it.
func kvCacheHint(err error) string {
	if errors.Is(err, generate.ErrCacheTooSmall) {
		return " (give a larger --kv-cache)"
	}
	return ""
}
