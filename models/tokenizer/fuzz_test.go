package tokenizer

import (
	"errors"
	"slices"
	"testing"
	"unicode/utf8"
)

// FuzzRoundTrip checks, on the tiny fixture tokenizer (byte-level BPE),
// that encoding never panics, that valid UTF-8 decodes back to itself in one
// go and streamed id by id, that BOS is the only difference addSpecial
// makes, and that invalid UTF-8 is rejected.
func FuzzRoundTrip(f *testing.F) {
	tok := loadTokenizer(f, tinyPath)
	for _, s := range []string{
		"", "Hello, world!", "  leading spaces and\ttabs\nnewlines", "naïve café — 日本語 🙂",
		"<|begin_of_text|>x<|end_of_text|>", "<|begin_of_tex", "it's 'LL 1234567", "\xe6\x97",
	} {
		f.Add(s)
	}
	bos, _ := tok.BOS()
	f.Fuzz(func(t *testing.T, s string) {
		ids, err := tok.Encode(s, false)
		if !utf8.ValidString(s) {
			if !errors.Is(err, ErrInvalidUTF8) {
				t.Fatalf("Encode(%q) of invalid UTF-8: err = %v", s, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("Encode(%q): %v", s, err)
		}
		got, err := tok.Decode(ids, false)
		if err != nil {
			t.Fatalf("Decode(%v): %v", ids, err)
		}
		if got != s {
			t.Fatalf("round trip of %q gave %q (ids %v)", s, got, ids)
		}
		withBOS, err := tok.Encode(s, true)
		if err != nil || len(withBOS) != len(ids)+1 || withBOS[0] != bos || !slices.Equal(withBOS[1:], ids) {
			t.Fatalf("Encode(%q, true) = %v, %v; want BOS then %v", s, withBOS, err, ids)
		}
		if got := streamDecode(t, tok, ids, true); got != s {
			t.Fatalf("streamed round trip of %q gave %q", s, got)
		}
	})
}
