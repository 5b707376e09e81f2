// Package loadgen is a load generator for an OpenAI-compatible server
// (infer serve, or any other): concurrent clients each send streaming
// requests back to back for a duration and measure what a user sees —
// the time to the first token, the time between tokens, tokens per second
// over all clients, and every failure. A 429 (the server's queue is full)
// is counted apart from failures and retried after its Retry-After.
//
// Its command is bench/loadgen/ft-loadgen; the serve package's load test
// runs it in-process.
package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Options describe a load.
type Options struct {
	// URL is the server's base URL (http://127.0.0.1:8080).
	URL string
	// APIKey, when set, is sent as a Bearer token.
	APIKey string
	// Model is the request's model field ("" leaves it out).
	Model string
	// Clients is the number of concurrent clients; 0: 1.
	Clients int
	// Duration is how long clients start new requests; requests in flight
	// at the end finish (within the context).
	Duration time.Duration
	// Requests, when > 0, ends each client after this many requests
	// (whichever of it and Duration comes first; Duration 0: no limit).
	Requests int
	// PromptWords is the prompt's length in words (about a token each);
	// 0: 16.
	PromptWords int
	// MaxTokens is each request's max_tokens; 0: 32.
	MaxTokens int
	// Completions sends /v1/completions instead of /v1/chat/completions.
	Completions bool
	// Temperature of the requests (seeded per request, so reproducible).
	Temperature float64
	// DisconnectEvery, when > 0, makes every n-th request hang up after
	// its first token (a fault to inject); those count as Disconnected.
	DisconnectEvery int
	// Client sends the requests; nil: a client with keep-alive connections
	// for every client.
	Client *http.Client
}

// Percentiles summarise latency samples.
type Percentiles struct {
	N                  int
	P50, P90, P99, Max time.Duration
}

// String formats the percentiles on one line.
func (p Percentiles) String() string {
	if p.N == 0 {
		return "no samples"
	}
	r := func(d time.Duration) string { return d.Round(10 * time.Microsecond).String() }
	return fmt.Sprintf("p50 %s  p90 %s  p99 %s  max %s  (%d samples)", r(p.P50), r(p.P90), r(p.P99), r(p.Max), p.N)
}

// Report is what a load measured.
type Report struct {
	Requests     int // sent
	Completed    int // finished with a finish_reason and [DONE]
	Failed       int // anything else but 429s and injected disconnects
	RateLimited  int // 429 answers
	Disconnected int // hung up on purpose (DisconnectEvery)
	Tokens       int // completion tokens of completed requests (usage)
	Elapsed      time.Duration
	TokensPerSec float64
	TTFT, ITL    Percentiles
	// Errors counts failures by message (the first 200 characters).
	Errors map[string]int
}

// Format writes the report for a person.
func (r *Report) Format(w io.Writer) {
	fmt.Fprintf(w, "requests   %d sent, %d completed, %d failed, %d rate-limited (429), %d disconnected on purpose\n",
		r.Requests, r.Completed, r.Failed, r.RateLimited, r.Disconnected)
	fmt.Fprintf(w, "tokens     %d in %v: %.1f tokens/s\n", r.Tokens, r.Elapsed.Round(time.Millisecond), r.TokensPerSec)
	fmt.Fprintf(w, "TTFT       %s\n", r.TTFT)
	fmt.Fprintf(w, "inter-token %s\n", r.ITL)
	keys := make([]string, 0, len(r.Errors))
	for k := range r.Errors {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "error      %d× %s\n", r.Errors[k], k)
	}
}

// errDisconnected marks a request hung up on purpose.
var errDisconnected = errors.New("disconnected on purpose")

// errRateLimited is a 429, with its Retry-After.
type errRateLimited struct{ after time.Duration }

func (e errRateLimited) Error() string { return "429 Too Many Requests" }

// Run applies the load and reports. It returns an error only for bad
// options; failed requests are in the report.
func Run(ctx context.Context, opt Options) (*Report, error) {
	if opt.URL == "" {
		return nil, errors.New("loadgen: no server URL")
	}
	if opt.Duration <= 0 && opt.Requests <= 0 {
		return nil, errors.New("loadgen: give a duration or a number of requests per client")
	}
	if opt.Clients <= 0 {
		opt.Clients = 1
	}
	if opt.PromptWords <= 0 {
		opt.PromptWords = 16
	}
	if opt.MaxTokens <= 0 {
		opt.MaxTokens = 32
	}
	client := opt.Client
	if client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = opt.Clients
		tr.MaxConnsPerHost = 0
		client = &http.Client{Transport: tr}
		defer tr.CloseIdleConnections()
	}
	var (
		mu   sync.Mutex
		rep  = &Report{Errors: map[string]int{}}
		ttft []time.Duration
		itl  []time.Duration
	)
	start := time.Now()
	deadline := time.Time{}
	if opt.Duration > 0 {
		deadline = start.Add(opt.Duration)
	}
	var wg sync.WaitGroup
	for c := range opt.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; opt.Requests <= 0 || n < opt.Requests; n++ {
				if ctx.Err() != nil || (!deadline.IsZero() && time.Now().After(deadline)) {
					return
				}
				seq := c*1_000_003 + n
				hangUp := opt.DisconnectEvery > 0 && (seq%opt.DisconnectEvery) == opt.DisconnectEvery-1
				res := one(ctx, client, opt, seq, hangUp)
				mu.Lock()
				rep.Requests++
				var rl errRateLimited
				switch {
				case res.err == nil:
					rep.Completed++
					rep.Tokens += res.tokens
					ttft = append(ttft, res.ttft)
					itl = append(itl, res.gaps...)
				case errors.Is(res.err, errDisconnected):
					rep.Disconnected++
				case errors.As(res.err, &rl):
					rep.RateLimited++
				default:
					rep.Failed++
					msg := res.err.Error()
					if len(msg) > 200 {
						msg = msg[:200]
					}
					rep.Errors[msg]++
				}
				mu.Unlock()
				if errors.As(res.err, &rl) {
					select {
					case <-time.After(rl.after):
					case <-ctx.Done():
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	rep.Elapsed = time.Since(start)
	if rep.Elapsed > 0 {
		rep.TokensPerSec = float64(rep.Tokens) / rep.Elapsed.Seconds()
	}
	rep.TTFT, rep.ITL = percentiles(ttft), percentiles(itl)
	return rep, nil
}

func percentiles(xs []time.Duration) Percentiles {
	if len(xs) == 0 {
		return Percentiles{}
	}
	slices.Sort(xs)
	at := func(q float64) time.Duration {
		i := int(math.Ceil(q*float64(len(xs)))) - 1
		return xs[max(0, min(i, len(xs)-1))]
	}
	return Percentiles{N: len(xs), P50: at(0.5), P90: at(0.9), P99: at(0.99), Max: xs[len(xs)-1]}
}

// result is one request's measurements.
type result struct {
	err    error
	tokens int
	ttft   time.Duration
	gaps   []time.Duration
}

// words is the vocabulary prompts are made of.
var words = strings.Fields("the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches in old towns")

func prompt(n, seq int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[(seq*7+i*3)%len(words)])
	}
	return b.String()
}

// one sends one streaming request and reads it to the end.
func one(ctx context.Context, client *http.Client, opt Options, seq int, hangUp bool) result {
	body := map[string]any{"max_tokens": opt.MaxTokens, "stream": true, "stream_options": map[string]any{"include_usage": true},
		"temperature": opt.Temperature, "seed": seq}
	path := "/v1/chat/completions"
	if opt.Completions {
		path = "/v1/completions"
		body["prompt"] = prompt(opt.PromptWords, seq)
	} else {
		body["messages"] = []map[string]any{{"role": "user", "content": prompt(opt.PromptWords, seq)}}
	}
	if opt.Model != "" {
		body["model"] = opt.Model
	}
	data, _ := json.Marshal(body)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(opt.URL, "/")+path, bytes.NewReader(data))
	if err != nil {
		return result{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	if opt.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+opt.APIKey)
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return result{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusTooManyRequests {
		io.Copy(io.Discard, resp.Body)
		after, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		return result{err: errRateLimited{time.Duration(max(after, 1)) * time.Second}}
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1000))
		return result{err: fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(msg))}
	}
	var res result
	var last time.Time
	finished, done := false, false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			done = true
			break
		}
		var ev struct {
			Error   *struct{ Message string } `json:"error"`
			Choices []struct {
				Text         string  `json:"text"`
				FinishReason *string `json:"finish_reason"`
				Delta        struct {
					Content *string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			return result{err: fmt.Errorf("bad event %q: %v", line, err)}
		}
		if ev.Error != nil {
			return result{err: fmt.Errorf("error event: %s", ev.Error.Message)}
		}
		if ev.Usage != nil {
			res.tokens = ev.Usage.CompletionTokens
		}
		for _, c := range ev.Choices {
			if c.FinishReason != nil {
				finished = true
			}
			if c.Text == "" && (c.Delta.Content == nil || *c.Delta.Content == "") {
				continue
			}
			now := time.Now()
			if last.IsZero() {
				res.ttft = now.Sub(start)
				if hangUp {
					cancel()
					return result{err: errDisconnected}
				}
			} else {
				res.gaps = append(res.gaps, now.Sub(last))
			}
			last = now
		}
	}
	if err := sc.Err(); err != nil {
		return result{err: fmt.Errorf("reading the stream: %v", err)}
	}
	if !done || !finished {
		return result{err: fmt.Errorf("the stream ended early (finish_reason seen: %v, [DONE] seen: %v)", finished, done)}
	}
	if last.IsZero() {
		res.ttft = time.Since(start)
	}
	return res
}
