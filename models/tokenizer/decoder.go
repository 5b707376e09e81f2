package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// decoder turns token texts back into text. Like Hugging Face's decoders it
// maps a list of strings to a list of strings; the results are concatenated.
type decoder interface {
	decodeChain(tokens []string) []string
}

// sequenceDecoder applies decoders in order ("Sequence").
type sequenceDecoder []decoder

func (d sequenceDecoder) decodeChain(tokens []string) []string {
	for _, dec := range d {
		tokens = dec.decodeChain(tokens)
	}
	return tokens
}

// byteLevelDecoder undoes the byte-to-character mapping of the ByteLevel
// pre-tokenizer ("ByteLevel"). A token with a character outside the mapping
// contributes its UTF-8 bytes unchanged. Invalid UTF-8 in the result becomes
// U+FFFD.
type byteLevelDecoder struct{}

func (byteLevelDecoder) decodeChain(tokens []string) []string {
	var raw []byte
	for _, tok := range tokens {
		n := len(raw)
		ok := true
		for _, r := range tok {
			b, found := runeToByte[r]
			if !found {
				ok = false
				break
			}
			raw = append(raw, b)
		}
		if !ok {
			raw = append(raw[:n], tok...)
		}
	}
	return []string{lossyString(raw)}
}

// replaceDecoder replaces a pattern in each token ("Replace").
type replaceDecoder struct {
	pattern matcher
	content string
}

func (d replaceDecoder) decodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, tok := range tokens {
		out[i] = replaceAll(d.pattern, tok, d.content)
	}
	return out
}

// byteFallbackDecoder turns runs of "<0xXX>" byte tokens back into text
// ("ByteFallback"). A run that is not valid UTF-8 becomes one U+FFFD per
// byte, as in Hugging Face.
type byteFallbackDecoder struct{}

func (byteFallbackDecoder) decodeChain(tokens []string) []string {
	out := make([]string, 0, len(tokens))
	var pending []byte
	flush := func() {
		if len(pending) == 0 {
			return
		}
		if utf8.Valid(pending) {
			out = append(out, string(pending))
		} else {
			for range pending {
				out = append(out, "\uFFFD")
			}
		}
		pending = pending[:0]
	}
	for _, tok := range tokens {
		if b, ok := parseByteToken(tok); ok {
			pending = append(pending, b)
			continue
		}
		flush()
		out = append(out, tok)
	}
	flush()
	return out
}

// parseByteToken recognises byte-fallback tokens such as "<0x0A>".
func parseByteToken(tok string) (byte, bool) {
	if len(tok) != 6 || !strings.HasPrefix(tok, "<0x") || tok[5] != '>' {
		return 0, false
	}
	hi, ok1 := hexDigit(tok[3])
	lo, ok2 := hexDigit(tok[4])
	if !ok1 || !ok2 {
		return 0, false
	}
	return hi<<4 | lo, true
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// fuseDecoder joins all tokens into one ("Fuse").
type fuseDecoder struct{}

func (fuseDecoder) decodeChain(tokens []string) []string {
	return []string{strings.Join(tokens, "")}
}

// stripDecoder removes up to start leading and stop trailing occurrences of
// a character from each token ("Strip").
type stripDecoder struct {
	content     rune
	start, stop int
}

func (d stripDecoder) decodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, tok := range tokens {
		for n := 0; n < d.start; n++ {
			r, size := utf8.DecodeRuneInString(tok)
			if size == 0 || r != d.content {
				break
			}
			tok = tok[size:]
		}
		for n := 0; n < d.stop; n++ {
			r, size := utf8.DecodeLastRuneInString(tok)
			if size == 0 || r != d.content {
				break
			}
			tok = tok[:len(tok)-size]
		}
		out[i] = tok
	}
	return out
}

// metaspaceDecoder turns the Metaspace replacement character back into
// spaces ("Metaspace"). Unless the prepend scheme is "never", Hugging Face
// drops every replacement character of the first token (not just the one
// the pre-tokenizer prepended), and so does this decoder.
type metaspaceDecoder struct {
	replacement rune
	prepend     prependScheme
}

func (d metaspaceDecoder) decodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, tok := range tokens {
		var sb strings.Builder
		sb.Grow(len(tok))
		for _, r := range tok {
			if r == d.replacement {
				if i == 0 && d.prepend != prependNever {
					continue
				}
				sb.WriteByte(' ')
				continue
			}
			sb.WriteRune(r)
		}
		out[i] = sb.String()
	}
	return out
}

// lossyString converts b to a string, replacing each maximal ill-formed
// subsequence with U+FFFD (the behaviour of Rust's String::from_utf8_lossy,
// which Hugging Face's decoders use).
func lossyString(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(len(b) + 8)
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || size > 1 {
			sb.Write(b[i : i+size])
			i += size
			continue
		}
		sb.WriteString("\uFFFD")
		i += invalidPrefixLen(b[i:])
	}
	return sb.String()
}

// invalidPrefixLen returns the length of the maximal ill-formed subsequence
// at the start of b, which is not a valid UTF-8 encoding: the lead byte plus
// the continuation bytes that still fit a well-formed sequence.
func invalidPrefixLen(b []byte) int {
	need, lo, hi := utf8SeqInfo(b[0])
	if need == 0 {
		return 1
	}
	n := 1
	for k := 1; k <= need && n < len(b); k++ {
		c := b[n]
		if k == 1 {
			if c < lo || c > hi {
				break
			}
		} else if c < 0x80 || c > 0xBF {
			break
		}
		n++
	}
	return n
}

// utf8SeqInfo returns, for a lead byte, how many continuation bytes follow
// it and the allowed range of the first one (Unicode Table 3-7). need is 0
// for bytes that cannot start a sequence.
func utf8SeqInfo(c byte) (need int, lo, hi byte) {
	switch {
	case c >= 0xC2 && c <= 0xDF:
		return 1, 0x80, 0xBF
	case c == 0xE0:
		return 2, 0xA0, 0xBF
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		return 2, 0x80, 0xBF
	case c == 0xED:
		return 2, 0x80, 0x9F
	case c == 0xF0:
		return 3, 0x90, 0xBF
	case c >= 0xF1 && c <= 0xF3:
		return 3, 0x80, 0xBF
	case c == 0xF4:
		return 3, 0x80, 0x8F
	}
	return 0, 0, 0
}
