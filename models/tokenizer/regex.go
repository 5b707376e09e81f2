package tokenizer

import (
	"strings"

	"github.com/dlclark/regexp2"
)

// matcher finds the non-overlapping matches of a pattern, left to right.
type matcher interface {
	// find appends the [start, end) byte offsets of each match in s to dst.
	find(dst [][2]int, s string) [][2]int
}

// literalMatcher matches a fixed, non-empty string.
type literalMatcher string

func (m literalMatcher) find(dst [][2]int, s string) [][2]int {
	pat := string(m)
	for off := 0; ; {
		i := strings.Index(s[off:], pat)
		if i < 0 {
			return dst
		}
		dst = append(dst, [2]int{off + i, off + i + len(pat)})
		off += i + len(pat)
	}
}

// regexMatcher runs a tokenizer.json regex (written for Oniguruma) with
// regexp2, a backtracking engine that, unlike Go's regexp, supports the
// lookahead these patterns use, and whose \s, \p{L} and \p{N} classes agree
// with Oniguruma's Unicode definitions.
type regexMatcher struct {
	re *regexp2.Regexp
}

func compileRegex(pattern string) (regexMatcher, error) {
	re, err := regexp2.Compile(pattern, regexp2.None)
	if err != nil {
		return regexMatcher{}, err
	}
	return regexMatcher{re: re}, nil
}

func (m regexMatcher) find(dst [][2]int, s string) [][2]int {
	if s == "" {
		return dst
	}
	runes := []rune(s)
	// regexp2 reports rune offsets; byteAt converts them to byte offsets.
	byteAt := make([]int, 0, len(runes)+1)
	for i := range s {
		byteAt = append(byteAt, i)
	}
	byteAt = append(byteAt, len(s))
	match, err := m.re.FindRunesMatch(runes)
	for err == nil && match != nil {
		dst = append(dst, [2]int{byteAt[match.Index], byteAt[match.Index+match.Length]})
		match, err = m.re.FindNextMatch(match)
	}
	// regexp2 only fails on a timeout, and none is set.
	return dst
}
