package tokenizer

import (
	"strings"
	"testing"
)

// benchText is a mixed-language text of about 60 KB built from the corpus.
func benchText(b *testing.B) string {
	ref, _ := loadReference(b, "llama3")
	var sb strings.Builder
	for sb.Len() < 60_000 {
		for _, c := range ref.Cases {
			sb.WriteString(c.Text)
			sb.WriteString(" ")
		}
	}
	return sb.String()
}

func benchmarkEncode(b *testing.B, path string, cold bool) {
	tok := loadTokenizer(b, path)
	text := benchText(b)
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for b.Loop() {
		if cold {
			tok.model.mu.Lock()
			clear(tok.model.cache)
			tok.model.mu.Unlock()
		}
		if _, err := tok.Encode(text, true); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeLlama3(b *testing.B) {
	benchmarkEncode(b, "testdata/llama3-8b-instruct.tokenizer.json.gz", false)
}

func BenchmarkEncodeLlama3Cold(b *testing.B) {
	benchmarkEncode(b, "testdata/llama3-8b-instruct.tokenizer.json.gz", true)
}

func BenchmarkEncodeMistral(b *testing.B) {
	benchmarkEncode(b, "testdata/mistral.tokenizer.json.gz", false)
}

func BenchmarkDecodeLlama3(b *testing.B) {
	tok := loadTokenizer(b, "testdata/llama3-8b-instruct.tokenizer.json.gz")
	text := benchText(b)
	ids, err := tok.Encode(text, false)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		if _, err := tok.Decode(ids, true); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseLlama3(b *testing.B) {
	data := readData(b, "testdata/llama3-8b-instruct.tokenizer.json.gz")
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Parse(data, "llama3"); err != nil {
			b.Fatal(err)
		}
	}
}
