package tokenizer

import (
	"encoding/json"
	"slices"
	"testing"
	"unicode/utf8"
)

type preTokenizeReference struct {
	Cases []struct {
		Text   string   `json:"text"`
		Llama3 []string `json:"llama3"`
		Qwen   []string `json:"qwen"`
		GPT2   []string `json:"gpt2"`
	} `json:"cases"`
}

// words runs a pre-tokenizer and returns the words it emits.
func words(pt preTokenizer, text string) []string {
	var out []string
	pt.preTokenize(piece{text: text}, func(p piece) { out = append(out, p.text) })
	return out
}

// preTokenizers returns the Llama 3, Qwen 3 and GPT-2 pre-tokenizers, with
// the hand-written pattern matchers (fast) or with regexp2.
func preTokenizers(t testing.TB, fast bool) (llama3, qwen, gpt2 preTokenizer) {
	if fast {
		return loadTokenizer(t, "testdata/llama3-8b-instruct.tokenizer.json.gz").pre,
			loadTokenizer(t, "testdata/qwen3.tokenizer.json.gz").pre,
			byteLevelPre{split: gpt2Matcher}
	}
	llama3 = sequencePre{
		splitPre{pattern: mustCompile(llama3Pattern), behavior: splitIsolated},
		byteLevelPre{},
	}
	qwen = sequencePre{
		splitPre{pattern: mustCompile(qwenPattern), behavior: splitIsolated},
		byteLevelPre{},
	}
	return llama3, qwen, byteLevelPre{split: mustCompile(gpt2Pattern)}
}

func mustCompile(pattern string) regexMatcher {
	m, err := compileRegex(pattern)
	if err != nil {
		panic(err)
	}
	return m
}

// TestPreTokenizeMatchesHuggingFace compares the pieces of the Llama 3,
// Qwen 3 and GPT-2 pre-tokenizers with Hugging Face's on every corpus string.
func TestPreTokenizeMatchesHuggingFace(t *testing.T) {
	var ref preTokenizeReference
	if err := json.Unmarshal(readData(t, "testdata/reference_pretokenize.json.gz"), &ref); err != nil {
		t.Fatal(err)
	}
	if _, ok := loadTokenizer(t, "testdata/llama3-8b-instruct.tokenizer.json.gz").pre.(sequencePre)[0].(splitPre).pattern.(scanner); !ok {
		t.Fatal("the Llama 3 pattern does not use the hand-written matcher")
	}
	if _, ok := loadTokenizer(t, "testdata/qwen3.tokenizer.json.gz").pre.(sequencePre)[0].(splitPre).pattern.(scanner); !ok {
		t.Fatal("the Qwen pattern does not use the hand-written matcher")
	}
	for _, fast := range []bool{true, false} {
		llama3, qwen, gpt2 := preTokenizers(t, fast)
		mismatches := 0
		for _, c := range ref.Cases {
			got := words(llama3, c.Text)
			if !slices.Equal(got, c.Llama3) && (len(got) > 0 || len(c.Llama3) > 0) {
				mismatches++
				t.Logf("fast=%v llama3 %q:\n got %q\nwant %q", fast, c.Text, got, c.Llama3)
			}
			got = words(qwen, c.Text)
			if !slices.Equal(got, c.Qwen) && (len(got) > 0 || len(c.Qwen) > 0) {
				mismatches++
				t.Logf("fast=%v qwen %q:\n got %q\nwant %q", fast, c.Text, got, c.Qwen)
			}
			got = words(gpt2, c.Text)
			if !slices.Equal(got, c.GPT2) && (len(got) > 0 || len(c.GPT2) > 0) {
				mismatches++
				t.Logf("fast=%v gpt2 %q:\n got %q\nwant %q", fast, c.Text, got, c.GPT2)
			}
		}
		if fast && mismatches > 0 {
			t.Errorf("hand-written matchers: %d mismatches with Hugging Face", mismatches)
		}
		if !fast {
			t.Logf("regexp2 matchers: %d mismatches with Hugging Face over %d strings", mismatches, len(ref.Cases))
		}
	}
}

// FuzzPatterns checks the hand-written matchers against regexp2 running the
// same patterns. The patterns are only compared on text without 'ſ', which
// Oniguruma's (?i) folds to 's' (as the hand-written matcher does) and
// regexp2 does not.
func FuzzPatterns(f *testing.F) {
	for _, s := range []string{"", "Hello, world!", "  a \n\n b\t\tc", "it's 1234 'LL", "日本語 🙂!!\r\n", " \u00a0\u3000x"} {
		f.Add(s)
	}
	fastL3, slowL3 := scanner{next: llama3Next}, mustCompile(llama3Pattern)
	fastQw, slowQw := scanner{next: qwenNext}, mustCompile(qwenPattern)
	fastG2, slowG2 := gpt2Matcher, mustCompile(gpt2Pattern)
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		for _, r := range s {
			if r == 'ſ' {
				return
			}
		}
		if a, b := fastL3.find(nil, s), slowL3.find(nil, s); !slices.Equal(a, b) {
			t.Errorf("llama3 pattern on %q: fast %v, regexp2 %v", s, a, b)
		}
		if a, b := fastQw.find(nil, s), slowQw.find(nil, s); !slices.Equal(a, b) {
			t.Errorf("qwen pattern on %q: fast %v, regexp2 %v", s, a, b)
		}
		if a, b := fastG2.find(nil, s), slowG2.find(nil, s); !slices.Equal(a, b) {
			t.Errorf("gpt2 pattern on %q: fast %v, regexp2 %v", s, a, b)
		}
	})
}
