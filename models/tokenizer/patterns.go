package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// gpt2Pattern is the pattern the ByteLevel pre-tokenizer splits with when
// use_regex is true.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// llama3Pattern is the Split pattern of the Llama 3 tokenizer.json.
const llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// qwenPattern is the Split pattern of the Qwen 2 and Qwen 3 tokenizer.json:
// Llama 3's with single digits (\p{N} instead of \p{N}{1,3}).
const qwenPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// gpt2Matcher finds the matches of gpt2Pattern.
var gpt2Matcher = scanner{next: gpt2Next}

// fastPath returns a hand-written matcher for the regexes it knows (the
// Llama 3, Qwen and GPT-2 patterns), which is many times faster than the general
// engine and is tested against both it and Hugging Face; other patterns
// keep m.
func fastPath(m regexMatcher, _ *object) matcher {
	switch m.re.String() {
	case llama3Pattern:
		return scanner{next: llama3Next}
	case qwenPattern:
		return scanner{next: qwenNext}
	case gpt2Pattern:
		return gpt2Matcher
	}
	return m
}

// scanner is a matcher for a pattern whose matches, like those of the GPT-2
// and Llama 3 patterns, tile the whole text: next returns the end of the
// match that starts at s[i].
type scanner struct {
	next func(s string, i int) int
}

func (sc scanner) find(dst [][2]int, s string) [][2]int {
	for i := 0; i < len(s); {
		j := sc.next(s, i)
		dst = append(dst, [2]int{i, j})
		i = j
	}
	return dst
}

// Character classes of the patterns, matching Oniguruma's Unicode
// definitions of \p{L}, \p{N} and \s (White_Space).
func isL(r rune) bool { return unicode.IsLetter(r) }
func isN(r rune) bool { return unicode.IsNumber(r) }
func isS(r rune) bool { return unicode.IsSpace(r) }

// isOther reports [^\s\p{L}\p{N}].
func isOther(r rune) bool { return !isS(r) && !isL(r) && !isN(r) }

func runeAt(s string, i int) (rune, int) {
	if i >= len(s) {
		return -1, 0
	}
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// skip returns the end of the run of characters satisfying class from i.
func skip(s string, i int, class func(rune) bool) int {
	for i < len(s) {
		r, n := runeAt(s, i)
		if !class(r) {
			break
		}
		i += n
	}
	return i
}

// contraction returns the end of 's, 't, 're, 've, 'm, 'll or 'd at s[i],
// or -1. With fold, letters match case-insensitively under Unicode simple
// case folding (where ſ folds to s), as Oniguruma's (?i) does.
func contraction(s string, i int, fold bool) int {
	if i >= len(s) || s[i] != '\'' {
		return -1
	}
	lower := func(j int) (rune, int) {
		r, n := runeAt(s, j)
		if fold {
			switch {
			case r >= 'A' && r <= 'Z':
				r += 'a' - 'A'
			case r == 'ſ':
				r = 's'
			}
		}
		return r, n
	}
	r, n := lower(i + 1)
	switch r {
	case 's', 't', 'm', 'd':
		return i + 1 + n
	case 'r', 'v', 'l':
		want := rune('e')
		if r == 'l' {
			want = 'l'
		}
		if r2, n2 := lower(i + 1 + n); r2 == want {
			return i + 1 + n + n2
		}
	}
	return -1
}

// whitespace handles the alternatives \s+(?!\S)|\s+ for a run of white
// space starting at i: the run, less its last character when a non-space
// follows and the run is longer than one character.
func whitespace(s string, i int) int {
	j := skip(s, i, isS)
	if j == len(s) {
		return j
	}
	_, first := runeAt(s, i)
	if j-i > first {
		_, last := utf8.DecodeLastRuneInString(s[:j])
		return j - last
	}
	return j
}

// gpt2Next returns the end of the match of gpt2Pattern at s[i].
func gpt2Next(s string, i int) int {
	if j := contraction(s, i, false); j > 0 {
		return j
	}
	r, n := runeAt(s, i)
	start := i
	if r == ' ' {
		if r2, n2 := runeAt(s, i+n); r2 >= 0 && !isS(r2) {
			// " ?" takes the space; what follows decides the class.
			r, start = r2, i+n
			n = n2
		}
	}
	switch {
	case isL(r):
		return skip(s, start, isL)
	case isN(r):
		return skip(s, start, isN)
	case !isS(r):
		return skip(s, start, isOther)
	}
	return whitespace(s, i)
}

// llama3Next returns the end of the match of llama3Pattern at s[i].
func llama3Next(s string, i int) int { return llamaStyleNext(s, i, 3) }

// qwenNext returns the end of the match of qwenPattern at s[i].
func qwenNext(s string, i int) int { return llamaStyleNext(s, i, 1) }

// llamaStyleNext returns the end of the match at s[i] of the Llama 3
// pattern with \p{N}{1,digits} for its numbers.
func llamaStyleNext(s string, i int, digits int) int {
	if j := contraction(s, i, true); j > 0 {
		return j
	}
	r, n := runeAt(s, i)
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if isL(r) {
		return skip(s, i, isL)
	}
	if r != '\r' && r != '\n' && !isN(r) {
		if r2, _ := runeAt(s, i+n); r2 >= 0 && isL(r2) {
			return skip(s, i+n, isL)
		}
	}
	// \p{N}{1,digits}
	if isN(r) {
		j := i + n
		for k := 1; k < digits; k++ {
			r2, n2 := runeAt(s, j)
			if r2 < 0 || !isN(r2) {
				break
			}
			j += n2
		}
		return j
	}
	//  ?[^\s\p{L}\p{N}]+[\r\n]*
	start := -1
	if isOther(r) {
		start = i
	} else if r == ' ' {
		if r2, _ := runeAt(s, i+n); r2 >= 0 && isOther(r2) {
			start = i + n
		}
	}
	if start >= 0 {
		j := skip(s, start, isOther)
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j
	}
	// r is white space from here on.
	// \s*[\r\n]+: up to the last line break in the run of white space.
	end := skip(s, i, isS)
	for j := end - 1; j >= i; j-- {
		if s[j] == '\r' || s[j] == '\n' {
			return j + 1
		}
	}
	// \s+(?!\S)|\s+
	return whitespace(s, i)
}
