package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/internal/testfile"
	"github.com/flextensor-go/flextensor/models/llama"
)

// chatCheckpointDir writes a model directory holding the tokenizer.json and
// tokenizer_config.json of a family ("qwen3" or "llama3_1") from the test
// data, and, with a config, a tiny random checkpoint of that vocabulary.
func chatCheckpointDir(t *testing.T, family string, withModel bool) string {
	t.Helper()
	dir := t.TempDir()
	for name, src := range map[string]string{
		"tokenizer.json":        "../../models/tokenizer/testdata/" + family + ".tokenizer.json.gz",
		"tokenizer_config.json": "../../models/chat/testdata/" + family + ".tokenizer_config.json",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), testfile.Read(t, src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if withModel {
		cfg := llama.Shapes["deep-test"]
		cfg.VocabSize, cfg.HiddenSize, cfg.IntermediateSize, cfg.NumHiddenLayers = 151936, 16, 32, 1
		cfg.HeadDim, cfg.NumAttentionHeads, cfg.NumKeyValueHeads = 8, 2, 1
		cfg.BOSTokenID, cfg.EOSTokenIDs = 0, []int{1}
		if err := llama.MakeCheckpoint(dir, cfg, 1, 1<<30); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

type chatCase struct {
	Name     string                     `json:"name"`
	Template string                     `json:"template"`
	Vars     map[string]json.RawMessage `json:"vars"`
	AddGen   bool                       `json:"add_generation_prompt"`
	Messages json.RawMessage            `json:"messages"`
}

// chatReferences returns the chat test cases with their Python renderings
// and Hugging Face's ids for them (models/chat/testdata).
func chatReferences(t *testing.T) (cases map[string]chatCase, texts map[string]string, ids map[string][]int) {
	t.Helper()
	var spec struct{ Cases []chatCase }
	var rend struct {
		Renderings []struct {
			Name string  `json:"name"`
			Text *string `json:"text"`
		}
	}
	var ref struct {
		Cases []struct {
			Name string `json:"name"`
			IDs  []int  `json:"ids"`
		}
	}
	for path, v := range map[string]any{"cases.json": &spec, "reference_renderings.json": &rend, "reference_ids.json": &ref} {
		data, err := os.ReadFile("../../models/chat/testdata/" + path)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, v); err != nil {
			t.Fatal(err)
		}
	}
	cases, texts, ids = map[string]chatCase{}, map[string]string{}, map[string][]int{}
	for _, c := range spec.Cases {
		cases[c.Name] = c
	}
	for _, r := range rend.Renderings {
		if r.Text != nil {
			texts[r.Name] = *r.Text
		}
	}
	for _, c := range ref.Cases {
		ids[c.Name] = c.IDs
	}
	return cases, texts, ids
}

// TestTokenizeMessages: infer tokenize --messages renders each conversation
// exactly as jinja2 does and gives Hugging Face's ids for it.
func TestTokenizeMessages(t *testing.T) {
	cases, texts, ids := chatReferences(t)
	dirs := map[string]string{
		"qwen3.tokenizer_config.json":    chatCheckpointDir(t, "qwen3", false),
		"llama3_1.tokenizer_config.json": chatCheckpointDir(t, "llama3_1", false),
	}
	checked := 0
	for name, c := range cases {
		dir, ok := dirs[c.Template]
		if !ok || len(c.Vars) > 0 || !c.AddGen {
			continue // --messages always adds the generation prompt and has no variables
		}
		file := filepath.Join(t.TempDir(), "messages.json")
		if err := os.WriteFile(file, c.Messages, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, src := range [][]string{{"--model", dir}, {"--tokenizer", filepath.Join(dir, "tokenizer.json")}} {
			code, out, errOut := run(t, append([]string{"tokenize", "--messages", file, "--json"}, src...)...)
			if code != 0 {
				t.Fatalf("%s: exit %d: %s", name, code, errOut)
			}
			var got struct {
				Text string `json:"text"`
				IDs  []int  `json:"ids"`
			}
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("%s: %v in %q", name, err, out)
			}
			if got.Text != texts[name] {
				t.Errorf("%s: text %q, want %q", name, got.Text, texts[name])
			}
			if !slices.Equal(got.IDs, ids[name]) {
				t.Errorf("%s: ids %v, want %v", name, got.IDs, ids[name])
			}
			if strings.Contains(out, `\u003c`) {
				t.Errorf("%s: the JSON escapes '<': %q", name, out)
			}
		}
		checked++
	}
	if checked < 8 {
		t.Fatalf("only %d conversations checked", checked)
	}
}

func TestTokenizeMessagesErrors(t *testing.T) {
	dir := chatCheckpointDir(t, "qwen3", false)
	write := func(content string) string {
		f := filepath.Join(t.TempDir(), "m.json")
		if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--model", dir}, 2, "give --text TEXT"},
		{[]string{"--model", dir, "--text", "x", "--messages", write(`[]`)}, 2, "give --text TEXT"},
		{[]string{"--model", dir, "--add-special", "--messages", write(`[{"role": "user", "content": "x"}]`)}, 2, "--add-special does not apply"},
		{[]string{"--model", dir, "--messages", write(`{"role": "user"}`)}, 1, "expected a JSON array"},
		{[]string{"--model", dir, "--messages", write(`[{"role": "user", "content": 3}]`)}, 1, "messages[0] (user): content must be"},
		{[]string{"--model", dir, "--messages", filepath.Join(dir, "missing.json")}, 1, "missing.json"},
		// The tiny model's tokenizer has neither a chat template nor Llama 3 chat tokens.
		{[]string{"--messages", write(`[{"role": "user", "content": "x"}]`)}, 2, "no chat_template"},
	} {
		code, _, errOut := run(t, append([]string{"tokenize"}, c.args...)...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("tokenize %q: exit %d %q, want exit %d with %q", c.args, code, errOut, c.code, c.want)
		}
	}
}

// TestTemplateRaises: a template's raise_exception is a clear error.
func TestTemplateRaises(t *testing.T) {
	dir := chatCheckpointDir(t, "llama3_1", false)
	cfg := `{"bos_token": "<s>", "chat_template": "{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('Tool messages are not supported by this template') }}{% endif %}{{ m.content }}{% endfor %}"}`
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "m.json")
	if err := os.WriteFile(f, []byte(`[{"role": "tool", "content": "x"}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := run(t, "tokenize", "--model", dir, "--messages", f)
	if code != 1 || !strings.Contains(errOut, "Tool messages are not supported by this template") || !strings.Contains(errOut, "tokenizer_config.json") {
		t.Errorf("exit %d %q", code, errOut)
	}
}

// TestChatTemplate: run-model --chat (with --system) renders the prompt with
// the checkpoint's template and stops at the template's end token.
func TestChatTemplate(t *testing.T) {
	cases, _, ids := chatReferences(t)
	for _, c := range []struct{ family, name string }{{"qwen3", "qwen3-system"}, {"llama3_1", "llama3_1-system"}} {
		dir := chatCheckpointDir(t, c.family, true)
		var msgs []struct{ Role, Content string }
		if err := json.Unmarshal(cases[c.name].Messages, &msgs); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := run(t, "run-model", "--model", dir, "--chat", "--system", msgs[0].Content, "--prompt", msgs[1].Content, "--max-new-tokens", "1", "--json")
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", c.family, code, errOut)
		}
		var got struct {
			PromptIDs []int `json:"prompt_ids"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.PromptIDs, ids[c.name]) {
			t.Errorf("%s: prompt ids %v, want %v", c.family, got.PromptIDs, ids[c.name])
		}
		tok, err := loadTokenizer(dir)
		if err != nil {
			t.Fatal(err)
		}
		_, stops, err := chatPrompt(dir, tok, "", "hi")
		if err != nil {
			t.Fatal(err)
		}
		end := map[string]string{"qwen3": "<|im_end|>", "llama3_1": "<|eot_id|>"}[c.family]
		want, _ := tok.TokenID(end)
		if !slices.Equal(stops, []int32{int32(want)}) {
			t.Errorf("%s: stop ids %v, want [%d] (%s)", c.family, stops, want, end)
		}
	}
	code, _, errOut := run(t, "run-model", "--system", "x", "--prompt", "hi")
	if code != 2 || !strings.Contains(errOut, "--system needs --chat") {
		t.Errorf("--system without --chat: exit %d %q", code, errOut)
	}
}

// TestTokenizeBundledErrorNamesModel: tokenize without --model or
// --tokenizer uses the bundled model, extracted to a temporary directory;
// an error about it names the bundled model, not that directory.
func TestTokenizeBundledErrorNamesModel(t *testing.T) {
	f := filepath.Join(t.TempDir(), "m.json")
	if err := os.WriteFile(f, []byte(`[{"role": "user", "content": "x"}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := run(t, "tokenize", "--messages", f, "--json")
	if code != 2 || !strings.Contains(errOut, bundledName+" has no chat_template") || strings.Contains(errOut, "flextensor-tiny-llama") {
		t.Errorf("tokenize --messages with the bundled model: exit %d, %q; want exit 2 naming %q, no temporary directory", code, errOut, bundledName)
	}
}
