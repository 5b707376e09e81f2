package serve_test

import (
	"testing"

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
	if n := small.KVBlocksInUse(); n != 0 {
		t.Errorf("%d KV blocks in use after", n)
	}
}
