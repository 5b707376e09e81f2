package serve_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/chat"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/models/generate"
	"github.com/flextensor-go/flextensor/models/tokenizer"
	"github.com/flextensor-go/flextensor/serve"
	"github.com/flextensor-go/flextensor/session"
)

// The bundled tiny model, opened twice: one copy serves, the other gives
// reference generations (decoder.Model.Generate, one request alone).
var (
	served, ref *session.Session
	tok         *tokenizer.Tokenizer
	tmpl        *chat.Template
	refMu       sync.Mutex
)

// testTemplate is a small chat format in the Llama 3 style (the tiny
// model's tokenizer has no chat tokens, so it is plain text to it).
const testTemplate = "{% for m in messages %}{{ bos_token if loop.first else '' }}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"

func TestMain(m *testing.M) {
	code := func() int {
		var err error
		if served, err = session.Open("", "cpu", session.Options{}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer served.Close()
		if ref, err = session.Open("", "cpu", session.Options{}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer ref.Close()
		if tok, err = tokenizer.Load(filepath.Join(served.Dir, "tokenizer.json")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		bos := "<|begin_of_text|>"
		if tmpl, err = chat.New(testTemplate, &bos, nil, "test template"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

// testServer is a server on the served model, its engine running, behind
// an httptest server.
type testServer struct {
	*serve.Server
	http  *httptest.Server
	cache interface{ Close() }
	log   *syncBuffer
}

type serverConfig struct {
	blocks  int // KV blocks (0: 512)
	sched   generate.Options
	opt     serve.Options
	noStart bool // do not run the engine (the test runs it)
}

func newServer(t testing.TB, cfg serverConfig) *testServer {
	t.Helper()
	if cfg.blocks == 0 {
		cfg.blocks = 512
	}
	cache, err := served.Model.NewPagedCache(served.Backend, cfg.blocks, 0)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.opt.Tokenizer == nil {
		cfg.opt.Tokenizer = tok
	}
	if cfg.opt.Template == nil {
		cfg.opt.Template = tmpl
	}
	if cfg.opt.ModelName == "" {
		cfg.opt.ModelName = "tiny"
	}
	log := &syncBuffer{}
	if cfg.opt.Logger == nil {
		cfg.opt.Logger = newJSONLogger(log)
	}
	srv, err := serve.New(served.Model, served.Backend, cache, cfg.sched, cfg.opt)
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{Server: srv, http: httptest.NewServer(srv.Handler()), cache: cache, log: log}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	if !cfg.noStart {
		go func() { srv.Run(ctx); close(done) }()
	}
	t.Cleanup(func() {
		if cfg.noStart {
			// Requests still queued retire once an engine runs (after the
			// test's own, if it started one).
			go func() { srv.Run(ctx); close(done) }()
		}
		ts.http.CloseClientConnections()
		ts.http.Close()
		cancel()
		<-done
		if err := srv.Close(); err != nil {
			t.Errorf("Server.Close: %v", err)
		}
		cache.Close()
	})
	return ts
}

func (ts *testServer) url(path string) string { return ts.http.URL + path }

// postLater sends a completion request body from another goroutine; the
// channel gets its status (0 if it got no answer).
func (ts *testServer) postLater(body string) <-chan int {
	status := make(chan int, 1)
	go func() {
		resp, err := http.Post(ts.url("/v1/completions"), "application/json", strings.NewReader(body))
		if err != nil {
			status <- 0
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		status <- resp.StatusCode
	}()
	return status
}

// post sends a JSON body (a string sent as is) and decodes the response.
func (ts *testServer) post(t testing.TB, path string, body any, hdr ...string) (int, map[string]any, http.Header) {
	t.Helper()
	var data []byte
	switch b := body.(type) {
	case string:
		data = []byte(b)
	case []byte:
		data = b
	default:
		var err error
		if data, err = json.Marshal(b); err != nil {
			t.Fatal(err)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, ts.url(path), bytes.NewReader(data))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("POST %s: response is not JSON: %v\n%s", path, err, raw)
	}
	return resp.StatusCode, out, resp.Header
}

func (ts *testServer) get(t testing.TB, path string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(ts.url(path))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

// events posts a streaming request and returns its data lines (the JSON
// events, then "[DONE]").
func (ts *testServer) events(t testing.TB, path string, body any) []string {
	t.Helper()
	data, _ := json.Marshal(body)
	resp, err := http.Post(ts.url(path), "application/json", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		raw, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST %s: status %d: %s", path, resp.StatusCode, raw)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q, want text/event-stream", ct)
	}
	var out []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		d, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("line %q is not a data line", line)
		}
		out = append(out, d)
	}
	return out
}

// waitFor polls cond up to d.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// reference generates with the reference model alone.
func reference(t testing.TB, prompt []int32, maxNew int, sp kernels.SampleParams, seed uint64) []int32 {
	t.Helper()
	refMu.Lock()
	defer refMu.Unlock()
	ids, err := ref.Model.Generate(ref.Backend, prompt, decoder.GenerateOptions{MaxNewTokens: maxNew, Sampling: sp, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// refText decodes generated ids as the server shows them (special tokens
// left out, unknown ids as U+FFFD).
func refText(ids []int32) string {
	d := tok.NewStreamDecoder()
	var b strings.Builder
	for _, id := range ids {
		s, err := d.Add(int(id))
		if err != nil {
			s = "\uFFFD"
		}
		b.WriteString(s)
	}
	b.WriteString(d.Flush())
	return b.String()
}

func encode(t testing.TB, text string, special bool) []int32 {
	t.Helper()
	ids, err := tok.Encode(text, special)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}

// chatPromptIDs renders messages as the server does.
func chatPromptIDs(t testing.TB, msgs ...chat.Message) []int32 {
	t.Helper()
	text, err := tmpl.Render(msgs, chat.Options{AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	return encode(t, text, false)
}

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// field walks a decoded JSON value: field(v, "choices", 0, "message").
func field(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}
