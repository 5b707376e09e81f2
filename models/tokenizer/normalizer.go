package tokenizer

import (
	"strings"

	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites a stretch of text before pre-tokenization.
type normalizer interface {
	normalize(s string) string
}

// prependNormalizer puts a fixed string before non-empty text ("Prepend").
type prependNormalizer struct{ prefix string }

func (n prependNormalizer) normalize(s string) string {
	if s == "" {
		return s
	}
	return n.prefix + s
}

// replaceNormalizer replaces every match of a pattern ("Replace").
type replaceNormalizer struct {
	pattern matcher
	content string
}

func (n replaceNormalizer) normalize(s string) string {
	return replaceAll(n.pattern, s, n.content)
}

// unicodeNormalizer puts text into a Unicode normalization form ("NFC",
// "NFD", "NFKC", "NFKD"; Qwen's tokenizers use NFC).
type unicodeNormalizer struct{ form norm.Form }

func (n unicodeNormalizer) normalize(s string) string {
	return n.form.String(s)
}

// sequenceNormalizer applies normalizers in order ("Sequence").
type sequenceNormalizer []normalizer

func (n sequenceNormalizer) normalize(s string) string {
	for _, m := range n {
		s = m.normalize(s)
	}
	return s
}

// replaceAll replaces every match of m in s by content.
func replaceAll(m matcher, s, content string) string {
	if lit, ok := m.(literalMatcher); ok {
		return strings.ReplaceAll(s, string(lit), content)
	}
	spans := m.find(nil, s)
	if len(spans) == 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + len(spans)*len(content))
	last := 0
	for _, sp := range spans {
		b.WriteString(s[last:sp[0]])
		b.WriteString(content)
		last = sp[1]
	}
	b.WriteString(s[last:])
	return b.String()
}
