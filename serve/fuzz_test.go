package serve

import (
	"errors"
	"testing"
)

// FuzzDecodeRequest: any body decodes to a request within the documented
// ranges or fails with a 400 *APIError; it never panics.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "temperature": 0.5, "top_p": 0.9, "seed": 3, "stop": ["a"], "stream": true, "stream_options": {"include_usage": true}, "n": 1}`,
		`{"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]}]}`,
		`{"prompt": "x", "max_completion_tokens": 7, "stop": "y"}`,
		`{"prompt": [1, 2, 3]}`,
		`{"prompt": ["one"]}`,
		`{"prompt": "x", "max_tokens": -1}`,
		`{"prompt": "x", "temperature": "hot"}`,
		`{"messages": "hi"}`,
		`{"prompt": 1e400}`,
		`[`, ``, `null`, `{"prompt": null, "messages": null}`,
	} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, body []byte, isChat bool) {
		r, err := DecodeRequest(body, isChat)
		if err != nil {
			var e *APIError
			if !errors.As(err, &e) || e.Status != 400 || e.Message == "" || e.Type == "" {
				t.Fatalf("error %#v is not a 400 APIError", err)
			}
			return
		}
		if r.Chat != isChat {
			t.Fatalf("Chat %v for isChat %v", r.Chat, isChat)
		}
		if isChat && len(r.Messages) == 0 {
			t.Fatal("a chat request without messages")
		}
		if !isChat && !r.PromptIsIDs && r.PromptIDs != nil {
			t.Fatal("prompt ids without PromptIsIDs")
		}
		if r.MaxTokens < 0 || r.Temperature < 0 || r.Temperature > 2 || !(r.TopP > 0 && r.TopP <= 1) || len(r.Stop) > maxStops {
			t.Fatalf("out of range: %+v", r)
		}
		for _, id := range r.PromptIDs {
			if id < 0 {
				t.Fatalf("negative token id in %v", r.PromptIDs)
			}
		}
		if r.IncludeUsage && !r.Stream {
			t.Fatal("include_usage without stream")
		}
	})
}
