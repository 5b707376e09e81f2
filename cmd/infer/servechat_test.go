package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// chatCheckpoint is a copy of the tiny Llama fixture with a chat template
// of its own (tokenizer_config.json), for the README's chat examples.
func chatCheckpoint(t *testing.T) string {
	t.Helper()
	src := "../../testdata/tiny-llama"
	dir := t.TempDir()
	for _, name := range []string{"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"} {
		data, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := `{"bos_token": "<|begin_of_text|>", "eos_token": "<|end|>", "chat_template": ` +
		`"{% for m in messages %}{{ bos_token if loop.first else '' }}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"}`
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestServeNoChatTemplate: a checkpoint without a chat template, which
// run-model --chat and tokenize --messages refuse, makes
// /v1/chat/completions a 400 naming the missing chat_template (no Llama 3
// format as plain text); plain completions are served. With a template the
// same weights serve chat.
func TestServeNoChatTemplate(t *testing.T) {
	post := func(addr, path, body string) (int, map[string]any) {
		t.Helper()
		resp, err := http.Post("http://"+addr+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var v map[string]any
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatalf("POST %s: %v\n%s", path, err, raw)
		}
		return resp.StatusCode, v
	}
	chatBody := `{"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 2}`
	_, addr, stderr := startServe(t, nil, "--model", "../../testdata/tiny-llama", "--log-format", "off")
	if !strings.Contains(stderr.String(), "no chat format") {
		t.Errorf("no note about the missing chat format:\n%s", stderr.String())
	}
	code, out := post(addr, "/v1/chat/completions", chatBody)
	e, _ := out["error"].(map[string]any)
	if msg, _ := e["message"].(string); code != 400 || e["code"] != "no_chat_template" || !strings.Contains(msg, "chat_template") {
		t.Errorf("chat without a template: %d %v; want 400 no_chat_template naming chat_template", code, out)
	}
	if code, out := post(addr, "/v1/completions", `{"prompt": "Hello", "max_tokens": 2}`); code != 200 {
		t.Errorf("completions without a template: %d %v", code, out)
	}
	_, addr, _ = startServe(t, nil, "--model", chatCheckpoint(t), "--log-format", "off")
	if code, out := post(addr, "/v1/chat/completions", chatBody); code != 200 {
		t.Errorf("chat with a template: %d %v", code, out)
	}
}
