package serve_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/chat"
	"github.com/flextensor-go/flextensor/models/generate"
	"github.com/flextensor-go/flextensor/models/kvcache"
	"github.com/flextensor-go/flextensor/serve"
)

// TestDefaultMaxTokens: a request without max_tokens is limited by the
// server's default, capped by what the KV cache holds for one sequence,
// and ends with finish_reason "length" there; an explicit max_tokens that
// does not fit is still a 400.
func TestDefaultMaxTokens(t *testing.T) {
	prompt := "The quick brown fox"
	ids := encode(t, prompt, true)

	// The default: 5 new tokens when max_tokens is left out.
	ts := newServer(t, serverConfig{opt: serve.Options{DefaultMaxTokens: 5}})
	want := reference(t, ids, 5, greedy, 0)
	code, out, _ := ts.post(t, "/v1/completions", map[string]any{"prompt": prompt, "temperature": 0})
	if code != 200 {
		t.Fatalf("no max_tokens, default 5: %d %v", code, out)
	}
	if got := field(out, "choices", 0, "text"); got != refText(want) {
		t.Errorf("text %q, want the reference's 5 tokens %q", got, refText(want))
	}
	wantFinish := "length"
	if len(want) < 5 {
		wantFinish = "stop"
	}
	if got := field(out, "choices", 0, "finish_reason"); got != wantFinish {
		t.Errorf("finish_reason %v, want %s", got, wantFinish)
	}
	if got := field(out, "usage", "completion_tokens"); got != float64(len(want)) {
		t.Errorf("completion_tokens %v, want %d", got, len(want))
	}

	// A cache of 2 blocks (fewer positions than the 256-token context):
	// leaving max_tokens out fits what the cache holds.
	positions := 2 * kvcache.DefaultBlockSize
	small := newServer(t, serverConfig{blocks: 2})
	code, out, _ = small.post(t, "/v1/completions", map[string]any{"prompt": prompt, "temperature": 0})
	if code != 200 {
		t.Fatalf("no max_tokens, %d-position cache: %d %v", positions, code, out)
	}
	maxNew := positions - len(ids) + 1
	want = reference(t, ids, maxNew, greedy, 0)
	if got := field(out, "usage", "completion_tokens"); got != float64(len(want)) {
		t.Errorf("%d-position cache: completion_tokens %v, want %d", positions, got, len(want))
	}
	if len(want) == maxNew && field(out, "choices", 0, "finish_reason") != "length" {
		t.Errorf("%d-position cache: finish_reason %v, want length", positions, field(out, "choices", 0, "finish_reason"))
	}
	// Chat too.
	code, out, _ = small.post(t, "/v1/chat/completions", map[string]any{"messages": userMsg("hello"), "temperature": 0})
	if code != 200 {
		t.Errorf("chat without max_tokens, %d-position cache: %d %v", positions, code, out)
	}
	// An explicit max_tokens beyond the cache is a clear 400.
	code, out, _ = small.post(t, "/v1/completions", map[string]any{"prompt": prompt, "max_tokens": positions + 1})
	if code != 400 || field(out, "error", "code") != "context_length_exceeded" {
		t.Errorf("max_tokens %d over a %d-position cache: %d %v", positions+1, positions, code, out)
	}
	// The scheduler's error names the cache; the server adds its flag.
	if msg, _ := field(out, "error", "message").(string); !strings.Contains(msg, "give a larger --kv-cache") || !strings.Contains(msg, "KV blocks") {
		t.Errorf("max_tokens %d over a %d-position cache: message %q, want the scheduler's error and the --kv-cache hint", positions+1, positions, msg)
	}
	if n := small.KVBlocksInUse(); n != 0 {
		t.Errorf("%d KV blocks in use after", n)
	}
}

// TestRequestValidation: unknown roles and null content are 400s naming
// the message; fields that change what the answer holds (structured
// output, tools, log probabilities, echo) are refused as "not supported";
// their plain settings and a prompt given as a list of one prompt are
// served.
func TestRequestValidation(t *testing.T) {
	ts := newServer(t, serverConfig{})
	refused := []struct {
		name, path, body, param, msg string
	}{
		{"unknown role", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}, {"role": "robot", "content": "beep"}]}`, "messages[1].role", `"robot"`},
		{"tool role", "/v1/chat/completions", `{"messages": [{"role": "tool", "content": "x"}]}`, "messages[0].role", "not supported"},
		{"null content", "/v1/chat/completions", `{"messages": [{"role": "user", "content": null}]}`, "messages[0].content", "null"},
		{"no content", "/v1/chat/completions", `{"messages": [{"role": "system", "content": "s"}, {"role": "user"}]}`, "messages[1].content", "missing"},
		{"json_object", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}}`, "response_format", "not supported: response_format"},
		{"json_schema", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {"name": "a"}}}`, "response_format", "not supported: response_format"},
		{"tools", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}]}`, "tools", "not supported: tools"},
		{"tool_choice required", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"}`, "tool_choice", "not supported: tool_choice"},
		{"tool_choice a function", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "function", "function": {"name": "f"}}}`, "tool_choice", "not supported: tool_choice"},
		{"functions", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "functions": [{"name": "f"}]}`, "functions", "not supported: functions"},
		{"chat logprobs", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "logprobs": true}`, "logprobs", "not supported: logprobs"},
		{"top_logprobs", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "top_logprobs": 3}`, "top_logprobs", "not supported: top_logprobs"},
		{"completions logprobs", "/v1/completions", `{"prompt": "x", "logprobs": 2}`, "logprobs", "not supported: logprobs"},
		{"echo", "/v1/completions", `{"prompt": "x", "echo": true}`, "echo", "not supported: echo"},
		{"two token id prompts", "/v1/completions", `{"prompt": [[1, 2], [3]]}`, "prompt", "2 prompts"},
		{"an empty token id prompt", "/v1/completions", `{"prompt": [[]]}`, "prompt[0]", "empty"},
		{"a bad id in a nested prompt", "/v1/completions", `{"prompt": [[1, "a"]]}`, "prompt[0][1]", "token id"},
		{"an id outside the vocabulary in a nested prompt", "/v1/completions", `{"prompt": [[1, 99999]]}`, "prompt[0][1]", "vocabulary"},
	}
	for _, c := range refused {
		code, out, _ := ts.post(t, c.path, c.body)
		msg, _ := field(out, "error", "message").(string)
		if code != 400 || field(out, "error", "param") != c.param || !strings.Contains(msg, c.msg) {
			t.Errorf("%s: %d %v; want 400, param %s, a message with %q", c.name, code, out, c.param, c.msg)
		}
	}

	// The plain settings of those fields change nothing.
	want := reference(t, chatPromptIDs(t, chat.Message{Role: "system", Content: "Be brief."}, chat.Message{Role: "user", Content: "Hi"}), 4, greedy, 0)
	code, out, _ := ts.post(t, "/v1/chat/completions", `{"messages": [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
		"max_tokens": 4, "temperature": 0, "response_format": {"type": "text"}, "tools": [], "tool_choice": "none", "logprobs": false, "top_logprobs": 0}`)
	if code != 200 || field(out, "choices", 0, "message", "content") != refText(want) {
		t.Errorf("plain settings, developer role: %d %v; want the reference %q", code, out, refText(want))
	}
	prompt := "The quick brown fox"
	ids := encode(t, prompt, true)
	wantText := refText(reference(t, ids, 5, greedy, 0))
	idList, _ := json.Marshal(ids)
	for _, p := range []string{`[` + string(idList) + `]`, `["` + prompt + `"]`} {
		code, out, _ := ts.post(t, "/v1/completions", `{"prompt": `+p+`, "max_tokens": 5, "temperature": 0, "echo": false}`)
		if code != 200 || field(out, "choices", 0, "text") != wantText || field(out, "usage", "prompt_tokens") != float64(len(ids)) {
			t.Errorf("prompt %s: %d %v; want the reference %q", p, code, out, wantText)
		}
	}
}

// TestAuthFirst: with an API key, every /v1/ path without the right key is
// a 401 (an unknown one too, and a wrong method), before a 404 or 405; the
// Bearer scheme is case-insensitive.
func TestAuthFirst(t *testing.T) {
	ts := newServer(t, serverConfig{opt: serve.Options{APIKey: "sekret"}})
	for _, c := range []struct{ method, path string }{
		{http.MethodPost, "/v1/embeddings"}, {http.MethodGet, "/v1/nothing/here"}, {http.MethodGet, "/v1/chat/completions"}, {http.MethodPost, "/v1/models"},
	} {
		for _, key := range []string{"", "Bearer wrong"} {
			req, _ := http.NewRequest(c.method, ts.url(c.path), strings.NewReader(`{}`))
			if key != "" {
				req.Header.Set("Authorization", key)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") == "" {
				t.Errorf("%s %s with %q: %d, want 401 with WWW-Authenticate", c.method, c.path, key, resp.StatusCode)
			}
		}
	}
	// With the key: 404 and 405 as before.
	if code, out, _ := ts.post(t, "/v1/embeddings", `{}`, "Authorization", "Bearer sekret"); code != 404 {
		t.Errorf("unknown path with the key: %d %v", code, out)
	}
	for _, scheme := range []string{"bearer", "BEARER", "Bearer", "beaRer"} {
		if code, out, _ := ts.post(t, "/v1/completions", `{"prompt": "x", "max_tokens": 1}`, "Authorization", scheme+" sekret"); code != 200 {
			t.Errorf("scheme %q: %d %v", scheme, code, out)
		}
	}
	for _, h := range []string{"Basic sekret", "Bearersekret", "sekret"} {
		if code, _, _ := ts.post(t, "/v1/completions", `{"prompt": "x", "max_tokens": 1}`, "Authorization", h); code != 401 {
			t.Errorf("Authorization %q: %d, want 401", h, code)
		}
	}
}

// metricValues reads the server's /metrics into name → value.
func metricValues(t *testing.T, ts *testServer) map[string]float64 {
	t.Helper()
	code, body := ts.get(t, "/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	values := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		var name string
		var v float64
		if _, err := fmt.Sscanf(line, "%s %g", &name, &v); err == nil && !strings.HasPrefix(line, "#") {
			values[name] = v
		}
	}
	return values
}

// TestOffloadMetrics: the flextensor_offload_* counters exist only with
// offload timing (Options.OffloadStats), and the passes of a burst that
// ends (the engine going idle) within a second are counted.
func TestOffloadMetrics(t *testing.T) {
	plain := newServer(t, serverConfig{})
	plain.post(t, "/v1/completions", `{"prompt": "x", "max_tokens": 2}`)
	for name := range metricValues(t, plain) {
		if strings.HasPrefix(name, "flextensor_offload_") {
			t.Errorf("/metrics has %s without offload timing", name)
		}
	}

	// A stand-in for the offload manager: passes accumulate as the test
	// says and each call takes them.
	var mu sync.Mutex
	pending, calls := 0, 0
	stats := func() (time.Duration, time.Duration, int) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		n := pending
		pending = 0
		return time.Duration(n) * time.Millisecond, time.Duration(n) * 2 * time.Millisecond, n
	}
	ts := newServer(t, serverConfig{opt: serve.Options{OffloadStats: stats}})
	mu.Lock()
	pending = 7
	mu.Unlock()
	if code, out, _ := ts.post(t, "/v1/completions", `{"prompt": "x", "max_tokens": 3}`); code != 200 {
		t.Fatalf("%d %v", code, out)
	}
	var v map[string]float64
	deadline := time.Now().Add(3 * time.Second)
	for {
		v = metricValues(t, ts)
		if v["flextensor_offload_passes_total"] == 7 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if v["flextensor_offload_passes_total"] != 7 || v["flextensor_offload_transfer_seconds_total"] != 0.007 || v["flextensor_offload_wait_seconds_total"] != 0.014 {
		t.Errorf("after an idle engine: offload passes %v, transfer %v s, wait %v s; want 7, 0.007, 0.014",
			v["flextensor_offload_passes_total"], v["flextensor_offload_transfer_seconds_total"], v["flextensor_offload_wait_seconds_total"])
	}
}

// TestPreemptionMetric: three requests whose prompts fit a cache of 3
// blocks but whose reaches (30 new tokens each) do not fit together: the
// first two run at once, the second is preempted when both cross into
// their second block, and every answer is still its reference (a greedy
// one, and a sampled one with its seed); /metrics counts the preemptions
// and swaps as the scheduler does. Without a swap area, and with one (the
// preempted request is swapped out: swaps counted).
func TestPreemptionMetric(t *testing.T) {
	for _, swap := range []int64{0, 1 << 20} {
		t.Run(fmt.Sprintf("swap=%d", swap), func(t *testing.T) { testPreemptionMetric(t, swap) })
	}
}

func testPreemptionMetric(t *testing.T, swapBytes int64) {
	ts := newServer(t, serverConfig{blocks: 3, noStart: true, sched: generate.Options{SwapBytes: swapBytes}})
	sampled := kernels.SampleParams{Temperature: 0.9}
	reqs := []struct {
		prompt string
		temp   float64
		seed   uint64
		sp     kernels.SampleParams
	}{{"The quick brown fox", 0, 0, greedy}, {"Once upon a time", 0.9, 5, sampled}, {"Hello there", 0, 0, greedy}}
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, out, _ := ts.post(t, "/v1/completions", map[string]any{"prompt": r.prompt, "max_tokens": 30, "temperature": r.temp, "seed": r.seed})
			if code != 200 {
				t.Errorf("request %d: %d %v", i, code, out)
				return
			}
			want := refText(reference(t, encode(t, r.prompt, true), 30, r.sp, r.seed))
			if got := field(out, "choices", 0, "text"); got != want {
				t.Errorf("request %d: %q, want its reference %q", i, got, want)
			}
		}()
		// Queued in order, so the sampled one is the second admitted.
		waitFor(t, 5*time.Second, "the request to queue", func() bool { return ts.Scheduler().Waiting() == i+1 })
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { ts.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	wg.Wait()
	n := ts.Scheduler().Preemptions()
	if n == 0 {
		t.Errorf("no preemption: three requests reaching 3 blocks each ran in a cache of 3")
	}
	v := metricValues(t, ts)
	if v["flextensor_scheduler_preemptions_total"] != float64(n) {
		t.Errorf("scheduler_preemptions_total %v, the scheduler counted %d", v["flextensor_scheduler_preemptions_total"], n)
	}
	sw := ts.Scheduler().Swaps()
	if v["flextensor_scheduler_swaps_total"] != float64(sw) {
		t.Errorf("scheduler_swaps_total %v, the scheduler counted %d", v["flextensor_scheduler_swaps_total"], sw)
	}
	if (swapBytes > 0) != (sw > 0) {
		t.Errorf("a swap area of %d bytes: %d swaps of %d preemptions", swapBytes, sw, n)
	}
	if n := ts.KVBlocksInUse(); n != 0 {
		t.Errorf("%d KV blocks in use after", n)
	}
}
