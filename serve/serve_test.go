package serve_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/chat"
	"github.com/flextensor-go/flextensor/models/generate"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/serve"
)

func newJSONLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewJSONHandler(w, nil)) }

var greedy = kernels.SampleParams{Temperature: 0}

func userMsg(text string) []map[string]any {
	return []map[string]any{{"role": "user", "content": text}}
}

func TestModelsAndHealth(t *testing.T) {
	ts := newServer(t, serverConfig{})
	code, body := ts.get(t, "/v1/models")
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID, Object, OwnedBy string
			Created             int64
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil || code != 200 {
		t.Fatalf("GET /v1/models: %d %s (%v)", code, body, err)
	}
	if list.Object != "list" || len(list.Data) != 1 || list.Data[0].ID != "tiny" || list.Data[0].Object != "model" || list.Data[0].Created == 0 {
		t.Errorf("GET /v1/models = %s", body)
	}
	if code, body := ts.get(t, "/v1/models/tiny"); code != 200 || !strings.Contains(string(body), `"id":"tiny"`) {
		t.Errorf("GET /v1/models/tiny: %d %s", code, body)
	}
	if code, body := ts.get(t, "/v1/models/other"); code != 404 || !strings.Contains(string(body), "model_not_found") {
		t.Errorf("GET /v1/models/other: %d %s", code, body)
	}
	code, body = ts.get(t, "/health")
	if code != 200 || !strings.Contains(string(body), `"status":"ok"`) {
		t.Errorf("GET /health: %d %s", code, body)
	}
}

func TestChatCompletion(t *testing.T) {
	ts := newServer(t, serverConfig{})
	code, out, _ := ts.post(t, "/v1/chat/completions", map[string]any{
		"model": "tiny", "messages": userMsg("Hello there"), "max_tokens": 12, "temperature": 0,
	})
	if code != 200 {
		t.Fatalf("status %d: %v", code, out)
	}
	want := reference(t, chatPromptIDs(t, chat.Message{Role: "user", Content: "Hello there"}), 12, greedy, 0)
	if id, _ := out["id"].(string); !strings.HasPrefix(id, "chatcmpl-") {
		t.Errorf("id %q", out["id"])
	}
	if out["object"] != "chat.completion" || out["model"] != "tiny" || out["created"].(float64) < 1e9 {
		t.Errorf("object/model/created: %v", out)
	}
	if got := field(out, "choices", 0, "message", "role"); got != "assistant" {
		t.Errorf("role %v", got)
	}
	if got := field(out, "choices", 0, "message", "content"); got != refText(want) {
		t.Errorf("content %q, want the reference generation %q", got, refText(want))
	}
	wantFinish := "length"
	if len(want) < 12 {
		wantFinish = "stop"
	}
	if got := field(out, "choices", 0, "finish_reason"); got != wantFinish {
		t.Errorf("finish_reason %v, want %s", got, wantFinish)
	}
	pt := len(chatPromptIDs(t, chat.Message{Role: "user", Content: "Hello there"}))
	if u := out["usage"]; field(u, "prompt_tokens") != float64(pt) || field(u, "completion_tokens") != float64(len(want)) ||
		field(u, "total_tokens") != float64(pt+len(want)) {
		t.Errorf("usage %v, want %d + %d", u, pt, len(want))
	}

	// max_completion_tokens is max_tokens' newer name (and wins).
	_, out, _ = ts.post(t, "/v1/chat/completions", map[string]any{"messages": userMsg("Hello there"), "max_tokens": 12, "max_completion_tokens": 3, "temperature": 0})
	if got := field(out, "usage", "completion_tokens"); got != float64(min(3, len(want))) {
		t.Errorf("max_completion_tokens 3: completion_tokens %v", got)
	}
	// Content parts are joined text; unknown fields are ignored.
	_, parts, _ := ts.post(t, "/v1/chat/completions", map[string]any{
		"messages":   []map[string]any{{"role": "user", "content": []map[string]any{{"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}}}},
		"max_tokens": 6, "temperature": 0, "frequency_penalty": 0.5, "logit_bias": map[string]any{"1": 2}, "user": "x", "n": 1,
	})
	wantParts := reference(t, chatPromptIDs(t, chat.Message{Role: "user", Content: "Hello\nthere"}), 6, greedy, 0)
	if got := field(parts, "choices", 0, "message", "content"); got != refText(wantParts) {
		t.Errorf("content parts: %q, want %q (%v)", got, refText(wantParts), parts)
	}
}

func TestCompletions(t *testing.T) {
	ts := newServer(t, serverConfig{})
	prompt := "The quick brown fox"
	ids := encode(t, prompt, true)
	want := reference(t, ids, 10, greedy, 0)
	for _, p := range []any{prompt, []string{prompt}, ids} {
		code, out, _ := ts.post(t, "/v1/completions", map[string]any{"prompt": p, "max_tokens": 10, "temperature": 0})
		if code != 200 {
			t.Fatalf("prompt %v: %d %v", p, code, out)
		}
		if id, _ := out["id"].(string); !strings.HasPrefix(id, "cmpl-") || out["object"] != "text_completion" {
			t.Errorf("id/object: %v", out)
		}
		if got := field(out, "choices", 0, "text"); got != refText(want) {
			t.Errorf("prompt %v: text %q, want %q", p, got, refText(want))
		}
		if got := field(out, "usage", "prompt_tokens"); got != float64(len(ids)) {
			t.Errorf("prompt %v: prompt_tokens %v, want %d", p, got, len(ids))
		}
	}
}

func TestSamplingFields(t *testing.T) {
	ts := newServer(t, serverConfig{})
	ids := encode(t, "Once upon a time", true)
	text := func(body map[string]any) string {
		body["prompt"], body["max_tokens"] = "Once upon a time", 16
		code, out, _ := ts.post(t, "/v1/completions", body)
		if code != 200 {
			t.Fatalf("%v: %d %v", body, code, out)
		}
		return field(out, "choices", 0, "text").(string)
	}
	// A seed fixes the sample, and it is the one the model gives alone.
	a := text(map[string]any{"temperature": 1.0, "seed": 7})
	if b := text(map[string]any{"temperature": 1.0, "seed": 7}); a != b {
		t.Errorf("seed 7 twice: %q then %q", a, b)
	}
	if want := refText(reference(t, ids, 16, kernels.SampleParams{Temperature: 1, TopP: 1}, 7)); a != want {
		t.Errorf("seed 7: %q, want the reference sample %q", a, want)
	}
	others := []string{text(map[string]any{"temperature": 1.0, "seed": 8}), text(map[string]any{"temperature": 1.0, "seed": 9})}
	if others[0] == a && others[1] == a {
		t.Errorf("seeds 7, 8, 9 give one text %q: the seed is not used", a)
	}
	// A tiny top_p keeps only the most likely token: greedy.
	wantGreedy := refText(reference(t, ids, 16, greedy, 0))
	if got := text(map[string]any{"temperature": 1.5, "top_p": 1e-6, "seed": 3}); got != wantGreedy {
		t.Errorf("top_p 1e-6: %q, want the greedy %q", got, wantGreedy)
	}
	if got := text(map[string]any{"temperature": 0}); got != wantGreedy {
		t.Errorf("temperature 0: %q, want %q", got, wantGreedy)
	}
}

func TestStop(t *testing.T) {
	ts := newServer(t, serverConfig{})
	ids := encode(t, "The quick brown fox", true)
	full := refText(reference(t, ids, 24, greedy, 0))
	runes := []rune(full)
	if len(runes) < 8 {
		t.Skipf("the reference text %q is too short to cut", full)
	}
	stop := string(runes[len(runes)/2 : len(runes)/2+2])
	want := full[:strings.Index(full, stop)]
	for _, s := range []any{stop, []string{"\x00never", stop}} {
		_, out, _ := ts.post(t, "/v1/completions", map[string]any{"prompt": "The quick brown fox", "max_tokens": 24, "temperature": 0, "stop": s})
		if got := field(out, "choices", 0, "text"); got != want {
			t.Errorf("stop %q: %q, want %q (the text before the stop)", s, got, want)
		}
		if got := field(out, "choices", 0, "finish_reason"); got != "stop" {
			t.Errorf("stop %q: finish_reason %v", s, got)
		}
		// Streamed, the text held back for a partial match is not shown.
		lines := ts.events(t, "/v1/completions", map[string]any{"prompt": "The quick brown fox", "max_tokens": 24, "temperature": 0, "stop": s, "stream": true})
		var b strings.Builder
		finish := ""
		for _, l := range lines[:len(lines)-1] {
			var c serve.TextCompletion
			if err := json.Unmarshal([]byte(l), &c); err != nil {
				t.Fatal(err)
			}
			b.WriteString(c.Choices[0].Text)
			if c.Choices[0].FinishReason != nil {
				finish = *c.Choices[0].FinishReason
			}
		}
		if b.String() != want || finish != "stop" {
			t.Errorf("streamed stop %q: %q (%s), want %q (stop)", s, b.String(), finish, want)
		}
	}
}

func TestChatStreaming(t *testing.T) {
	ts := newServer(t, serverConfig{})
	want := refText(reference(t, chatPromptIDs(t, chat.Message{Role: "user", Content: "Tell me"}), 10, greedy, 0))
	for _, usage := range []bool{false, true} {
		body := map[string]any{"messages": userMsg("Tell me"), "max_tokens": 10, "temperature": 0, "stream": true}
		if usage {
			body["stream_options"] = map[string]any{"include_usage": true}
		}
		lines := ts.events(t, "/v1/chat/completions", body)
		if lines[len(lines)-1] != "[DONE]" {
			t.Fatalf("last event %q, want [DONE]", lines[len(lines)-1])
		}
		var chunks []map[string]any
		for _, l := range lines[:len(lines)-1] {
			var c map[string]any
			if err := json.Unmarshal([]byte(l), &c); err != nil {
				t.Fatalf("event %q: %v", l, err)
			}
			chunks = append(chunks, c)
		}
		if field(chunks[0], "choices", 0, "delta", "role") != "assistant" {
			t.Errorf("first chunk %v: the role comes first", chunks[0])
		}
		var text strings.Builder
		id := chunks[0]["id"]
		finishes := 0
		for i, c := range chunks {
			if c["object"] != "chat.completion.chunk" || c["id"] != id || c["model"] != "tiny" {
				t.Errorf("chunk %d: %v", i, c)
			}
			_, has := c["usage"]
			if has != usage {
				t.Errorf("include_usage %v: chunk %d has usage %v", usage, i, has)
			}
			if s, ok := field(c, "choices", 0, "delta", "content").(string); ok {
				text.WriteString(s)
			}
			if f := field(c, "choices", 0, "finish_reason"); f != nil {
				finishes++
				if f != "length" && f != "stop" {
					t.Errorf("finish_reason %v", f)
				}
			}
		}
		if finishes != 1 {
			t.Errorf("%d chunks with a finish_reason, want 1", finishes)
		}
		if text.String() != want {
			t.Errorf("streamed %q, want %q", text.String(), want)
		}
		last := chunks[len(chunks)-1]
		if usage {
			if n, ok := field(last, "usage", "completion_tokens").(float64); !ok || n < 1 || len(last["choices"].([]any)) != 0 {
				t.Errorf("usage chunk %v", last)
			}
		}
	}
}

func TestCompletionsStreaming(t *testing.T) {
	ts := newServer(t, serverConfig{})
	want := refText(reference(t, encode(t, "Hello", true), 8, greedy, 0))
	lines := ts.events(t, "/v1/completions", map[string]any{"prompt": "Hello", "max_tokens": 8, "temperature": 0, "stream": true,
		"stream_options": map[string]any{"include_usage": true}})
	var text strings.Builder
	for _, l := range lines[:len(lines)-1] {
		var c serve.TextCompletion
		if err := json.Unmarshal([]byte(l), &c); err != nil {
			t.Fatal(err)
		}
		if c.Object != "text_completion" {
			t.Errorf("object %q", c.Object)
		}
		for _, ch := range c.Choices {
			text.WriteString(ch.Text)
		}
	}
	if text.String() != want || lines[len(lines)-1] != "[DONE]" {
		t.Errorf("streamed %q, want %q, then [DONE] (last %q)", text.String(), want, lines[len(lines)-1])
	}
	if !strings.Contains(lines[len(lines)-2], `"usage":{"prompt_tokens"`) {
		t.Errorf("no usage chunk: %s", lines[len(lines)-2])
	}
}

// TestErrors: each bad request is a 4xx in the OpenAI error shape, and the
// server keeps serving.
func TestErrors(t *testing.T) {
	ts := newServer(t, serverConfig{opt: serve.Options{MaxRequestBytes: 64 << 10}})
	long := strings.Repeat("lorem ipsum dolor sit amet ", 200) // well over the 256-token context
	cases := []struct {
		name, path string
		body       string
		status     int
		param      string
	}{
		{"malformed JSON", "/v1/chat/completions", `{"messages": [`, 400, ""},
		{"not an object", "/v1/chat/completions", `[1, 2]`, 400, ""},
		{"empty body", "/v1/completions", ``, 400, ""},
		{"two values", "/v1/completions", `{"prompt": "a"} {"prompt": "b"}`, 400, ""},
		{"messages a string", "/v1/chat/completions", `{"messages": "hi"}`, 400, "messages"},
		{"no messages", "/v1/chat/completions", `{"max_tokens": 3}`, 400, "messages"},
		{"empty messages", "/v1/chat/completions", `{"messages": []}`, 400, "messages"},
		{"role a number", "/v1/chat/completions", `{"messages": [{"role": 1, "content": "x"}]}`, 400, "messages[0].role"},
		{"content a number", "/v1/chat/completions", `{"messages": [{"role": "user", "content": 5}]}`, 400, "messages[0].content"},
		{"image part", "/v1/chat/completions", `{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}`, 400, "messages[0].content[0].type"},
		{"temperature a string", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}`, 400, "temperature"},
		{"temperature too high", "/v1/completions", `{"prompt": "x", "temperature": 3}`, 400, "temperature"},
		{"top_p zero", "/v1/completions", `{"prompt": "x", "top_p": 0}`, 400, "top_p"},
		{"max_tokens a bool", "/v1/completions", `{"prompt": "x", "max_tokens": true}`, 400, "max_tokens"},
		{"max_tokens fractional", "/v1/completions", `{"prompt": "x", "max_tokens": 2.5}`, 400, "max_tokens"},
		{"max_tokens negative", "/v1/completions", `{"prompt": "x", "max_tokens": -5}`, 400, "max_tokens"},
		{"max_tokens zero", "/v1/completions", `{"prompt": "x", "max_tokens": 0}`, 400, "max_tokens"},
		{"max_tokens huge", "/v1/completions", `{"prompt": "x", "max_tokens": 1000000000}`, 400, "max_tokens"},
		{"max_tokens enormous", "/v1/completions", `{"prompt": "x", "max_tokens": 1e300}`, 400, "max_tokens"},
		{"max_completion_tokens negative", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": -1}`, 400, "max_completion_tokens"},
		{"seed a string", "/v1/completions", `{"prompt": "x", "seed": "abc"}`, 400, "seed"},
		{"stream a string", "/v1/completions", `{"prompt": "x", "stream": "yes"}`, 400, "stream"},
		{"stream_options without stream", "/v1/completions", `{"prompt": "x", "stream_options": {"include_usage": true}}`, 400, "stream_options"},
		{"stop a number", "/v1/completions", `{"prompt": "x", "stop": 3}`, 400, "stop"},
		{"five stops", "/v1/completions", `{"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}`, 400, "stop"},
		{"n 2", "/v1/completions", `{"prompt": "x", "n": 2}`, 400, "n"},
		{"prompt a bool", "/v1/completions", `{"prompt": true}`, 400, "prompt"},
		{"two prompts", "/v1/completions", `{"prompt": ["a", "b"]}`, 400, "prompt"},
		{"token id outside the vocabulary", "/v1/completions", `{"prompt": [1, 2, 99999]}`, 400, "prompt[2]"},
		{"negative token id", "/v1/completions", `{"prompt": [1, -2]}`, 400, "prompt[1]"},
		{"prompt over the context", "/v1/completions", `{"prompt": "` + long + `"}`, 400, "prompt"},
		{"chat over the context", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "` + long + `"}]}`, 400, "messages"},
		{"model unknown", "/v1/completions", `{"prompt": "x", "model": "gpt-4"}`, 404, "model"},
		{"model a number", "/v1/completions", `{"prompt": "x", "model": 4}`, 400, "model"},
		{"body too large", "/v1/completions", `{"prompt": "` + strings.Repeat("a", 70<<10) + `"}`, 413, ""},
		{"unknown path", "/v1/embeddings", `{}`, 404, ""},
		{"invalid UTF-8", "/v1/completions", "{\"prompt\": \"\xff\xfe\"}", 400, ""},
	}
	for _, c := range cases {
		code, out, _ := ts.post(t, c.path, c.body)
		e, ok := out["error"].(map[string]any)
		if code != c.status || !ok {
			t.Errorf("%s: status %d, body %v; want %d with an error", c.name, code, out, c.status)
			continue
		}
		if msg, _ := e["message"].(string); msg == "" {
			t.Errorf("%s: no message: %v", c.name, e)
		}
		if typ, _ := e["type"].(string); typ == "" {
			t.Errorf("%s: no type: %v", c.name, e)
		}
		for _, k := range []string{"param", "code"} {
			if _, ok := e[k]; !ok {
				t.Errorf("%s: no %q key: %v", c.name, k, e)
			}
		}
		if p, _ := e["param"].(string); p != c.param {
			t.Errorf("%s: param %q, want %q (%v)", c.name, p, c.param, e["message"])
		}
	}
	// A wrong method is a 405 with Allow.
	resp, err := http.Get(ts.url("/v1/chat/completions"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST" {
		t.Errorf("GET /v1/chat/completions: %d, Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
	// Still serving.
	if code, out, _ := ts.post(t, "/v1/completions", `{"prompt": "x", "max_tokens": 2}`); code != 200 {
		t.Errorf("after the bad requests: %d %v", code, out)
	}
	if ts.KVBlocksInUse() != 0 {
		t.Errorf("%d KV blocks in use after", ts.KVBlocksInUse())
	}
}

func TestAPIKey(t *testing.T) {
	ts := newServer(t, serverConfig{opt: serve.Options{APIKey: "sekret"}})
	body := `{"prompt": "x", "max_tokens": 2}`
	for _, h := range [][]string{nil, {"Authorization", "Bearer wrong"}, {"Authorization", "sekret"}, {"Authorization", "Bearer sekret2"}} {
		code, out, hdr := ts.post(t, "/v1/completions", body, h...)
		if code != 401 || field(out, "error", "code") != "invalid_api_key" || hdr.Get("WWW-Authenticate") == "" {
			t.Errorf("header %v: %d %v", h, code, out)
		}
	}
	if code, out, _ := ts.post(t, "/v1/completions", body, "Authorization", "Bearer sekret"); code != 200 {
		t.Errorf("right key: %d %v", code, out)
	}
	if code, _ := ts.get(t, "/v1/models"); code != 401 {
		t.Errorf("GET /v1/models without the key: %d", code)
	}
	if code, _ := ts.get(t, "/health"); code != 200 {
		t.Errorf("GET /health needs no key: %d", code)
	}
}

// TestQueueFull: beyond the wait queue a request gets 429 with
// Retry-After; the queued one is served once the engine runs.
func TestQueueFull(t *testing.T) {
	ts := newServer(t, serverConfig{noStart: true, sched: generate.Options{MaxSeqs: 1, MaxQueue: 1}})
	first := ts.postLater(`{"prompt": "a", "max_tokens": 3}`)
	waitFor(t, 5*time.Second, "the first request to queue", func() bool { return ts.Scheduler().Waiting() == 1 })
	code, out, hdr := ts.post(t, "/v1/completions", `{"prompt": "b", "max_tokens": 3}`)
	if code != 429 || field(out, "error", "type") != "rate_limit_error" || hdr.Get("Retry-After") != "1" {
		t.Errorf("second request: %d %v, Retry-After %q; want 429 with Retry-After 1", code, out, hdr.Get("Retry-After"))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { ts.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	if c := <-first; c != 200 {
		t.Errorf("queued request: status %d", c)
	}
}

// TestClose: Close cancels a queued request (its client gets an answer),
// an engine started after it returns at once, and a request after it gets
// 503 shutting_down; a second Close does nothing.
func TestClose(t *testing.T) {
	ts := newServer(t, serverConfig{noStart: true})
	first := ts.postLater(`{"prompt": "a", "max_tokens": 3}`)
	waitFor(t, 5*time.Second, "the request to queue", func() bool { return ts.Scheduler().Waiting() == 1 })
	if err := ts.Close(); err != nil {
		t.Fatal(err)
	}
	if c := <-first; c == 200 || c == 0 {
		t.Errorf("request queued at Close: status %d, want an error answer", c)
	}
	if w, r := ts.Scheduler().Waiting(), ts.Scheduler().Running(); w+r != 0 {
		t.Errorf("after Close: %d waiting, %d running", w, r)
	}
	if ts.KVBlocksInUse() != 0 {
		t.Errorf("after Close: %d KV blocks in use", ts.KVBlocksInUse())
	}
	done := make(chan struct{})
	go func() { ts.Run(context.Background()); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run after Close did not return")
	}
	code, out, _ := ts.post(t, "/v1/completions", `{"prompt": "b", "max_tokens": 3}`)
	if code != 503 || field(out, "error", "code") != "shutting_down" {
		t.Errorf("request after Close: %d %v; want 503 shutting_down", code, out)
	}
	if err := ts.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestKVWait: with KV blocks for the whole reach of about two requests,
// eight concurrent ones wait their turn (or, admitted on their prompts'
// blocks, are preempted as the others grow) and all finish with their own
// reference output; a long prompt is prefilled in chunks between the
// others' decode steps.
func TestKVWait(t *testing.T) {
	ts := newServer(t, serverConfig{blocks: 12, sched: generate.Options{MaxBatchTokens: 16}})
	prompts := []string{"The quick brown fox", "Once upon a time", strings.Repeat("a long prompt ", 12), "Hello", "Lorem ipsum", "x y z", "One two three", "Go"}
	var wg sync.WaitGroup
	for i, p := range prompts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, out, _ := ts.post(t, "/v1/completions", map[string]any{"prompt": p, "max_tokens": 20, "temperature": 0})
			if code != 200 {
				t.Errorf("request %d: %d %v", i, code, out)
				return
			}
			want := refText(reference(t, encode(t, p, true), 20, greedy, 0))
			if got := field(out, "choices", 0, "text"); got != want {
				t.Errorf("request %d: %q, want %q", i, got, want)
			}
		}()
	}
	wg.Wait()
	if n := ts.KVBlocksInUse(); n != 0 {
		t.Errorf("%d KV blocks in use after", n)
	}
}

// TestDisconnect: a client that goes away mid-stream has its sequence
// cancelled and its KV blocks freed; the server goes on serving.
func TestDisconnect(t *testing.T) {
	ts := newServer(t, serverConfig{})
	for _, stream := range []bool{true, false} {
		ctx, cancel := context.WithCancel(context.Background())
		body := fmt.Sprintf(`{"prompt": "Tell a long story", "max_tokens": 200, "temperature": 1, "seed": 1, "stream": %v}`, stream)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.url("/v1/completions"), strings.NewReader(body))
		errc := make(chan error, 1)
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				br := bufio.NewReader(resp.Body)
				_, err = br.ReadString('\n') // the first event, then hang up
				cancel()
				resp.Body.Close()
			}
			errc <- err
		}()
		if stream {
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		} else {
			waitFor(t, 10*time.Second, "the request to run", func() bool { return ts.Scheduler().Running() == 1 })
			cancel()
			<-errc
		}
		waitFor(t, 5*time.Second, "the sequence to be freed", func() bool {
			return ts.Scheduler().Running() == 0 && ts.KVBlocksInUse() == 0
		})
		waitFor(t, 5*time.Second, "the request log line", func() bool { return strings.Count(ts.log.String(), `"finish_reason":"cancelled"`) >= 1 })
	}
	// The log says the client went away, with fewer tokens than asked.
	for _, line := range strings.Split(strings.TrimSpace(ts.log.String()), "\n") {
		var l map[string]any
		json.Unmarshal([]byte(line), &l)
		if l["finish_reason"] == "cancelled" && l["completion_tokens"].(float64) >= 200 {
			t.Errorf("a cancelled request ran to the end: %s", line)
		}
	}
	if code, out, _ := ts.post(t, "/v1/completions", `{"prompt": "x", "max_tokens": 2}`); code != 200 {
		t.Errorf("after the disconnects: %d %v", code, out)
	}
}

// TestDrain: when Serve's context ends, a request in flight finishes,
// new connections are refused, and Serve returns.
func TestDrain(t *testing.T) {
	rest, url, serveErr := drainStream(t, served.Backend, serve.Options{}, 60)
	if !strings.HasSuffix(rest, "data: [DONE]\n\n") || !strings.Contains(rest, `"finish_reason":"`) {
		t.Errorf("the in-flight stream did not finish:\n%s", rest)
	}
	if serveErr != nil {
		t.Errorf("Serve: %v", serveErr)
	}
	if _, err := http.Get(url + "/health"); err == nil {
		t.Error("the server still accepts connections after the drain")
	}
}

// drainStream serves the tiny model on b with opt (tokenizer, template and
// name filled in) under a context of its own, starts a streamed completion
// of maxNew tokens, ends the context once the first event has come (SIGTERM,
// as the command sees it) and reads the rest of the stream. It returns
// that rest, the server's base URL and what Serve returned.
func drainStream(t *testing.T, b kernels.Backend, opt serve.Options, maxNew int) (string, string, error) {
	t.Helper()
	cache, err := served.Model.NewPagedCache(served.Backend, 64, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cache.Close() })
	opt.Tokenizer, opt.Template, opt.ModelName = tok, tmpl, "tiny"
	srv, err := serve.New(served.Model, b, cache, generate.Options{}, opt)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln, nil) }()
	url := "http://" + ln.Addr().String()
	resp, err := http.Post(url+"/v1/completions", "application/json",
		strings.NewReader(fmt.Sprintf(`{"prompt": "Drain", "max_tokens": %d, "stream": true, "temperature": 0}`, maxNew)))
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	rest, err := io.ReadAll(br)
	resp.Body.Close()
	if err != nil {
		t.Errorf("reading the stream after the context ended: %v", err)
	}
	select {
	case serveErr := <-done:
		return string(rest), url, serveErr
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after the drain")
	}
	return "", "", nil
}

func TestMetricsAndLog(t *testing.T) {
	ts := newServer(t, serverConfig{})
	ts.post(t, "/v1/completions", `{"prompt": "metrics", "max_tokens": 5, "temperature": 0}`)
	ts.events(t, "/v1/chat/completions", map[string]any{"messages": userMsg("hi"), "max_tokens": 5, "stream": true})
	ts.post(t, "/v1/completions", `{"prompt": 1}`)
	code, body := ts.get(t, "/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	text := string(body)
	values := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		var name string
		var v float64
		if _, err := fmt.Sscanf(line, "%s %g", &name, &v); err == nil && !strings.HasPrefix(line, "#") {
			values[name] = v
		}
	}
	for _, name := range []string{"flextensor_queue_depth", "flextensor_running_sequences", "flextensor_kv_blocks_in_use",
		"flextensor_generation_tokens_per_second", "flextensor_scheduler_preemptions_total", "flextensor_scheduler_swaps_total", "flextensor_scheduler_swap_failures_total",
		"flextensor_scheduler_graph_steps_total", "flextensor_scheduler_solo_failures_total"} {
		if _, ok := values[name]; !ok {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if values["flextensor_kv_blocks_total"] != 512 || values["flextensor_kv_blocks_in_use"] != 0 {
		t.Errorf("kv blocks: %v total, %v in use", values["flextensor_kv_blocks_total"], values["flextensor_kv_blocks_in_use"])
	}
	if n := values["flextensor_scheduler_preemptions_total"]; n != 0 {
		t.Errorf("scheduler_preemptions_total %v with 512 blocks for two short requests, want 0", n)
	}
	gen := values["flextensor_generated_tokens_total"]
	if gen < 2 || gen > 10 {
		t.Errorf("generated_tokens_total %v, want 2..10", gen)
	}
	if values["flextensor_time_to_first_token_seconds_count"] != 2 {
		t.Errorf("time_to_first_token count %v, want 2", values["flextensor_time_to_first_token_seconds_count"])
	}
	if n := values["flextensor_inter_token_latency_seconds_count"]; n != gen-2 {
		t.Errorf("inter_token_latency count %v, want %v (tokens after the first)", n, gen-2)
	}
	if values[`flextensor_http_requests_total{code="400",path="/v1/completions"}`] != 1 {
		t.Errorf("requests_total: %v", values)
	}
	// The request log: one JSON line per request with its fields.
	var saw []string
	for _, line := range strings.Split(strings.TrimSpace(ts.log.String()), "\n") {
		var l map[string]any
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if l["msg"] != "request" {
			continue
		}
		saw = append(saw, fmt.Sprintf("%v %v", l["path"], l["status"]))
		if l["status"] == 200.0 && (l["id"] == nil || l["prompt_tokens"] == nil || l["completion_tokens"] == nil || l["ttft_ms"] == nil) {
			t.Errorf("log line lacks the request's fields: %s", line)
		}
	}
	want := []string{"/v1/completions 200", "/v1/chat/completions 200", "/v1/completions 400"}
	if !slices.Equal(saw, want) {
		t.Errorf("logged %v, want %v", saw, want)
	}
}

// TestPage: / serves the chat page, which talks to the same API.
func TestPage(t *testing.T) {
	ts := newServer(t, serverConfig{})
	code, body := ts.get(t, "/")
	if code != 200 || !strings.Contains(string(body), "/v1/chat/completions") || !strings.Contains(string(body), "<textarea") {
		t.Errorf("GET /: %d, %d bytes", code, len(body))
	}
}

// slowBackend is the CPU backend with every MatMul a millisecond slower,
// so that a generation outlasts a short drain timeout.
type slowBackend struct{ *kernels.CPUBackend }

func (b slowBackend) MatMul(out, x, w *runtime.Tensor) error {
	time.Sleep(time.Millisecond)
	return b.CPUBackend.MatMul(out, x, w)
}

// TestDrainTimeout: a stream still running at the drain timeout is
// cancelled, and its client still gets the cancellation event and
// data: [DONE] (the connection is not cut); Serve returns ErrDrainTimeout.
func TestDrainTimeout(t *testing.T) {
	cpu, ok := served.Backend.(*kernels.CPUBackend)
	if !ok {
		t.Skipf("the served backend is %T, not the CPU backend", served.Backend)
	}
	// 200 tokens take seconds on the slowed backend, far past the 100 ms drain.
	rest, _, serveErr := drainStream(t, slowBackend{cpu}, serve.Options{DrainTimeout: 100 * time.Millisecond}, 200)
	if !strings.HasSuffix(rest, "data: [DONE]\n\n") || !strings.Contains(rest, `"code":"cancelled"`) {
		t.Errorf("the stream cancelled at the drain timeout did not end with the cancellation and [DONE]:\n%s", rest)
	}
	if !errors.Is(serveErr, serve.ErrDrainTimeout) {
		t.Errorf("Serve: %v; want ErrDrainTimeout", serveErr)
	}
}

// TestHealthFailed: once Options.Failed reports an error (an offload
// engine that failed), /health is a 503 giving it as the reason.
func TestHealthFailed(t *testing.T) {
	var failed atomic.Pointer[error]
	ts := newServer(t, serverConfig{opt: serve.Options{Failed: func() error {
		if e := failed.Load(); e != nil {
			return *e
		}
		return nil
	}}})
	if code, body := ts.get(t, "/health"); code != 200 || !strings.Contains(string(body), `"status":"ok"`) {
		t.Fatalf("GET /health before the failure: %d %s", code, body)
	}
	e := errors.New("budget 50.00 MiB exceeds the free memory of cpu")
	failed.Store(&e)
	code, body := ts.get(t, "/health")
	if code != 503 || !strings.Contains(string(body), `"status":"failed"`) || !strings.Contains(string(body), "budget 50.00 MiB exceeds") {
		t.Errorf("GET /health after the failure: %d %s; want 503 with the reason", code, body)
	}
}
