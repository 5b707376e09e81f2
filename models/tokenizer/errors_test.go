package tokenizer

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// minimal is a small valid tokenizer.json that the error cases modify.
const minimal = `{
  "version": "1.0",
  "added_tokens": [{"id": 0, "content": "<s>", "special": true, "normalized": false}],
  "normalizer": null,
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
  "post_processor": null,
  "decoder": {"type": "ByteLevel"},
  "model": {"type": "BPE", "vocab": {"<s>": 0, "a": 1, "b": 2, "ab": 3}, "merges": ["a b"]}
}`

func TestParseMinimal(t *testing.T) {
	tok, err := Parse([]byte(minimal), "minimal.json")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := tok.Encode("abab<s>ba", true)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{3, 3, 0, 2, 1}; !slices.Equal(ids, want) {
		t.Errorf("Encode = %v, want %v", ids, want)
	}
	if _, ok := tok.BOS(); ok {
		t.Error("BOS reported without a post-processor")
	}
}

func TestFormatErrors(t *testing.T) {
	for _, tc := range []struct {
		name, old, new string
		field, msg     string
	}{
		{"bad json", `"version"`, `version`, "", "not valid tokenizer.json"},
		{"model type", `"type": "BPE"`, `"type": "WordPiece"`, "model.type", `unsupported model type "WordPiece"`},
		{"pre-tokenizer", `"type": "ByteLevel", "add_prefix_space"`, `"type": "Digits", "add_prefix_space"`, "pre_tokenizer.type", `unsupported pre-tokenizer type "Digits"`},
		{"nested pre-tokenizer", `"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}`,
			`"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "ByteLevel"}, {"type": "Punctuation"}]}`,
			"pre_tokenizer.pretokenizers[1].type", `unsupported pre-tokenizer type "Punctuation"`},
		{"normalizer", `"normalizer": null`, `"normalizer": {"type": "BertNormalizer"}`, "normalizer.type", `unsupported normalizer type "BertNormalizer"`},
		{"decoder", `"decoder": {"type": "ByteLevel"}`, `"decoder": {"type": "WordPiece"}`, "decoder.type", `unsupported decoder type "WordPiece"`},
		{"post-processor", `"post_processor": null`, `"post_processor": {"type": "BertProcessing"}`, "post_processor.type", `unsupported post-processor type "BertProcessing"`},
		{"merge token", `"merges": ["a b"]`, `"merges": ["a b", "b c"]`, "model.merges[1]", `token "c"`},
		{"merge form", `"merges": ["a b"]`, `"merges": ["a b c"]`, "model.merges[0]", "not two tokens"},
		{"merge pair", `"merges": ["a b"]`, `"merges": [["a", "b", "c"]]`, "model.merges[0]", "needs 2 tokens"},
		{"vocab", `"vocab": {"<s>": 0, "a": 1, "b": 2, "ab": 3}, `, ``, "model.vocab", "missing"},
		{"unk", `"type": "BPE",`, `"type": "BPE", "unk_token": "<unk>",`, "model.unk_token", "not in the vocabulary"},
		{"dropout", `"type": "BPE",`, `"type": "BPE", "dropout": 0.1,`, "model.dropout", "not supported"},
		{"regex", `"decoder": {"type": "ByteLevel"}`, `"decoder": {"type": "Replace", "pattern": {"Regex": "(["}, "content": ""}`, "decoder.pattern.Regex", "cannot compile"},
		{"split behavior", `"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}`,
			`"pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "Sideways"}`, "pre_tokenizer.behavior", `unknown split behavior "Sideways"`},
		{"template", `"post_processor": null`,
			`"post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}], "special_tokens": {}}`,
			"post_processor.single[0]", `special token "<bos>" is not defined`},
		{"added token", `"added_tokens": [{"id": 0, "content": "<s>", "special": true, "normalized": false}]`,
			`"added_tokens": [{"id": 0, "special": true}]`, "added_tokens[0].content", "missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := strings.Replace(minimal, tc.old, tc.new, 1)
			if data == minimal {
				t.Fatalf("replacement of %q did not apply", tc.old)
			}
			_, err := Parse([]byte(data), "some/tokenizer.json")
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("err = %v, want a *FormatError", err)
			}
			if fe.Source != "some/tokenizer.json" || fe.Field != tc.field || !strings.Contains(fe.Msg, tc.msg) {
				t.Errorf("err = %q (field %q), want field %q and message containing %q", err, fe.Field, tc.field, tc.msg)
			}
			if !strings.Contains(err.Error(), "some/tokenizer.json") || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("message %q does not name the file and field", err)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.json")
	if _, err := Load(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("Load of a missing file: err = %v", err)
	}
	bad := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := os.WriteFile(bad, []byte(strings.Replace(minimal, `"type": "BPE"`, `"type": "Unigram"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(bad)
	if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "model.type") {
		t.Errorf("Load of an unsupported file: err = %v", err)
	}
}
