package tokenizer_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/models/tokenizer"
)

// fuzzTexts are encoded by every tokenizer FuzzTokenizerJSON accepts: plain
// and spaced ASCII, multi-byte text, spelled-out special tokens of both
// families, and SentencePiece's space marker.
var fuzzTexts = []string{
	"", "Hello, world!", "  hello  abc\n\tthe end ", "naïve 日本語 🙂",
	"<s>a</s><unk><|begin_of_text|>x<|eot_id|>", "\u2581x \u2581", "it's 'LL 1234567",
}

// FuzzTokenizerJSON feeds arbitrary bytes to tokenizer.Parse as a
// tokenizer.json. It must not panic. A tokenizer it accepts must be usable
// and self-consistent: a token's text that TokenID knows leads back to the
// same text; encoding valid text never fails and gives ids
// that Decode accepts; streamed decoding adds up to Decode; ids outside the
// vocabulary are errors; and parsing the same bytes again gives the same
// tokens and encodings. The seed corpus (testdata/fuzz/FuzzTokenizerJSON) holds the tiny
// fixture's tokenizer.json, small tokenizers of both supported families, and
// broken variants of them.
func FuzzTokenizerJSON(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := tokenizer.Parse(data, "fuzz/tokenizer.json")
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz/tokenizer.json") {
				t.Fatalf("error does not name the source: %v", err)
			}
			return
		}
		n := tok.VocabSize()
		if n < 0 {
			t.Fatalf("VocabSize %d", n)
		}
		again, err := tokenizer.Parse(data, "fuzz/tokenizer.json")
		if err != nil {
			t.Fatalf("second Parse of accepted bytes failed: %v", err)
		}
		if again.VocabSize() != n {
			t.Fatalf("VocabSize %d, then %d on a second parse", n, again.VocabSize())
		}
		for id := range min(n, 1<<12) {
			s, ok := tok.Token(id)
			if s2, ok2 := again.Token(id); s2 != s || ok2 != ok {
				t.Fatalf("Token(%d) = %q, %v; on a second parse %q, %v", id, s, ok, s2, ok2)
			}
			if !ok {
				continue
			}
			// An added token with normalized=true is listed in normalized
			// form, which TokenID need not know; a form it knows must lead
			// back to the same text.
			if back, ok := tok.TokenID(s); ok {
				if s2, ok := tok.Token(back); !ok || s2 != s {
					t.Fatalf("Token(%d) = %q, TokenID gives %d whose token is %q", id, s, back, s2)
				}
			}
		}
		for _, id := range []int{-1, n, n + 1} {
			if _, ok := tok.Token(id); ok {
				t.Fatalf("Token(%d) found a token in a vocabulary of %d", id, n)
			}
			if _, err := tok.Decode([]int{id}, false); err == nil {
				t.Fatalf("Decode of id %d outside a vocabulary of %d succeeded", id, n)
			}
		}
		if bos, ok := tok.BOS(); ok && (bos < 0 || bos >= n) {
			t.Fatalf("BOS %d outside a vocabulary of %d", bos, n)
		}
		for _, text := range fuzzTexts {
			for _, special := range []bool{false, true} {
				ids, err := tok.Encode(text, special)
				if err != nil {
					t.Fatalf("Encode(%q, %v): %v", text, special, err)
				}
				for _, id := range ids {
					if id < 0 || id >= n {
						t.Fatalf("Encode(%q) gave id %d outside a vocabulary of %d", text, id, n)
					}
				}
				if ids2, err := again.Encode(text, special); err != nil || !slices.Equal(ids, ids2) {
					t.Fatalf("Encode(%q) differs between two parses of the same file: %v, %v (%v)", text, ids, ids2, err)
				}
				for _, skip := range []bool{false, true} {
					want, err := tok.Decode(ids, skip)
					if err != nil {
						t.Fatalf("Decode(Encode(%q)) = %v", text, err)
					}
					d := tok.NewStreamDecoderSpecial(!skip)
					var sb strings.Builder
					for _, id := range ids {
						piece, err := d.Add(id)
						if err != nil {
							t.Fatalf("stream decode of id %d: %v", id, err)
						}
						sb.WriteString(piece)
					}
					sb.WriteString(d.Flush())
					if got := sb.String(); got != want && !strings.Contains(want, "\uFFFD") {
						t.Fatalf("streamed decode of %v (skip special %v) = %q, Decode = %q", ids, skip, got, want)
					}
				}
			}
		}
	})
}
