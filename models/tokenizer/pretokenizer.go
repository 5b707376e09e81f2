package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// piece is a stretch of text on its way through pre-tokenization. first
// records whether it starts at the very beginning of the encoded text, which
// the Metaspace pre-tokenizer's prepend_scheme "first" depends on.
type piece struct {
	text  string
	first bool
}

// preTokenizer splits text into the words the model tokenizes separately.
type preTokenizer interface {
	// preTokenize calls emit with each word of p, in order. Empty words
	// are dropped.
	preTokenize(p piece, emit func(piece))
}

// sequencePre applies pre-tokenizers in order, each to every piece the
// previous one produced ("Sequence").
type sequencePre []preTokenizer

func (s sequencePre) preTokenize(p piece, emit func(piece)) {
	if len(s) == 0 {
		if p.text != "" {
			emit(p)
		}
		return
	}
	// stage[k] feeds a piece to pre-tokenizer k, whose output goes on to
	// stage[k+1]; the last stage is emit.
	stage := make([]func(piece), len(s)+1)
	stage[len(s)] = emit
	for k := len(s) - 1; k >= 0; k-- {
		pt, next := s[k], stage[k+1]
		stage[k] = func(q piece) { pt.preTokenize(q, next) }
	}
	stage[0](p)
}

// splitBehavior says what happens to the matches of a Split pre-tokenizer.
type splitBehavior int

const (
	splitRemoved splitBehavior = iota
	splitIsolated
	splitMergedWithPrevious
	splitMergedWithNext
	splitContiguous
)

var splitBehaviors = map[string]splitBehavior{
	"Removed":            splitRemoved,
	"Isolated":           splitIsolated,
	"MergedWithPrevious": splitMergedWithPrevious,
	"MergedWithNext":     splitMergedWithNext,
	"Contiguous":         splitContiguous,
}

// splitPre splits on a pattern ("Split").
type splitPre struct {
	pattern  matcher
	behavior splitBehavior
	invert   bool
}

func (sp splitPre) preTokenize(p piece, emit func(piece)) {
	splitText(p, sp.pattern, sp.behavior, sp.invert, emit)
}

// span is a stretch [start, end) of a string; match tells whether a pattern
// matched it.
type span struct {
	start, end int
	match      bool
}

// splitText cuts p at the matches of m and emits the parts that behavior
// keeps. It follows Hugging Face's NormalizedString::split.
func splitText(p piece, m matcher, behavior splitBehavior, invert bool, emit func(piece)) {
	s := p.text
	if s == "" {
		return
	}
	var buf [64][2]int
	matches := m.find(buf[:0], s)
	if len(matches) == 0 && !invert {
		// Nothing to split on: the whole text is kept as is.
		emit(p)
		return
	}
	if behavior == splitIsolated {
		// Every match and every stretch between matches is a piece.
		prev := 0
		for _, mt := range matches {
			if prev < mt[0] {
				emit(piece{text: s[prev:mt[0]], first: p.first && prev == 0})
			}
			if mt[0] < mt[1] {
				emit(piece{text: s[mt[0]:mt[1]], first: p.first && mt[0] == 0})
			}
			prev = mt[1]
		}
		if prev < len(s) {
			emit(piece{text: s[prev:], first: p.first && prev == 0})
		}
		return
	}
	// Alternate unmatched and matched spans covering s.
	spans := make([]span, 0, 2*len(matches)+1)
	prev := 0
	for _, mt := range matches {
		if prev != mt[0] {
			spans = append(spans, span{prev, mt[0], invert})
		}
		spans = append(spans, span{mt[0], mt[1], !invert})
		prev = mt[1]
	}
	if prev != len(s) {
		spans = append(spans, span{prev, len(s), invert})
	}

	// keep[i] false means spans[i] is dropped.
	type part struct {
		start, end int
		keep       bool
	}
	parts := make([]part, 0, len(spans))
	switch behavior {
	case splitIsolated:
		for _, sp := range spans {
			parts = append(parts, part{sp.start, sp.end, true})
		}
	case splitRemoved:
		for _, sp := range spans {
			parts = append(parts, part{sp.start, sp.end, !sp.match})
		}
	case splitContiguous:
		prevMatch := false
		for _, sp := range spans {
			if sp.match == prevMatch && len(parts) > 0 {
				parts[len(parts)-1].end = sp.end
			} else {
				parts = append(parts, part{sp.start, sp.end, true})
			}
			prevMatch = sp.match
		}
	case splitMergedWithPrevious:
		prevMatch := false
		for _, sp := range spans {
			if sp.match && !prevMatch && len(parts) > 0 {
				parts[len(parts)-1].end = sp.end
			} else {
				parts = append(parts, part{sp.start, sp.end, true})
			}
			prevMatch = sp.match
		}
	case splitMergedWithNext:
		// Walk backwards: a match joins the part that follows it.
		prevMatch := false
		for i := len(spans) - 1; i >= 0; i-- {
			sp := spans[i]
			if sp.match && !prevMatch && len(parts) > 0 {
				parts[len(parts)-1].start = sp.start
			} else {
				parts = append(parts, part{sp.start, sp.end, true})
			}
			prevMatch = sp.match
		}
		for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
			parts[i], parts[j] = parts[j], parts[i]
		}
	}
	for _, pt := range parts {
		if pt.keep && pt.end > pt.start {
			emit(piece{text: s[pt.start:pt.end], first: p.first && pt.start == 0})
		}
	}
}

// byteLevelPre maps every byte to a printable character, GPT-2 style,
// optionally splitting first with the GPT-2 pattern ("ByteLevel").
type byteLevelPre struct {
	addPrefixSpace bool
	split          matcher // nil when use_regex is false
}

func (b byteLevelPre) preTokenize(p piece, emit func(piece)) {
	if p.text == "" {
		return
	}
	if b.addPrefixSpace && !strings.HasPrefix(p.text, " ") {
		p.text = " " + p.text
	}
	if b.split == nil {
		emit(piece{text: byteLevelEncode(p.text), first: p.first})
		return
	}
	splitText(p, b.split, splitIsolated, false, func(q piece) {
		emit(piece{text: byteLevelEncode(q.text), first: q.first})
	})
}

// metaspacePre replaces spaces by a visible marker (normally "▁"), prepends
// one, and optionally splits before each marker ("Metaspace").
type metaspacePre struct {
	replacement string
	prepend     prependScheme
	split       bool
}

// prependScheme says when Metaspace prepends its replacement character.
type prependScheme int

const (
	prependAlways prependScheme = iota
	prependFirst
	prependNever
)

var prependSchemes = map[string]prependScheme{
	"always": prependAlways,
	"first":  prependFirst,
	"never":  prependNever,
}

func (m metaspacePre) preTokenize(p piece, emit func(piece)) {
	if p.text == "" {
		return
	}
	s := strings.ReplaceAll(p.text, " ", m.replacement)
	if !strings.HasPrefix(s, m.replacement) {
		if m.prepend == prependAlways || (m.prepend == prependFirst && p.first) {
			s = m.replacement + s
		}
	}
	if !m.split {
		emit(piece{text: s, first: p.first})
		return
	}
	// Split before each replacement character (MergedWithNext).
	rep := m.replacement
	start := 0
	for {
		from := start
		if strings.HasPrefix(s[start:], rep) {
			from += len(rep)
		}
		i := strings.Index(s[from:], rep)
		if i < 0 {
			break
		}
		cut := from + i
		emit(piece{text: s[start:cut], first: p.first && start == 0})
		start = cut
	}
	emit(piece{text: s[start:], first: p.first && start == 0})
}

// byteToRune is GPT-2's bytes_to_unicode table: printable bytes map to
// themselves, the others to code points from U+0100 on.
var byteToRune, byteToString, runeToByte = func() ([256]rune, [256]string, map[rune]byte) {
	var b2r [256]rune
	var b2s [256]string
	r2b := make(map[rune]byte, 256)
	n := 0
	for b := 0; b < 256; b++ {
		printable := (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
		if printable {
			b2r[b] = rune(b)
		} else {
			b2r[b] = rune(256 + n)
			n++
		}
		b2s[b] = string(b2r[b])
		r2b[b2r[b]] = byte(b)
	}
	return b2r, b2s, r2b
}()

// byteLevelEncode maps every byte of s through byteToRune.
func byteLevelEncode(s string) string {
	var sb strings.Builder
	sb.Grow(2 * len(s))
	for i := 0; i < len(s); i++ {
		r := byteToRune[s[i]]
		if r < utf8.RuneSelf {
			sb.WriteByte(byte(r))
		} else {
			sb.WriteString(byteToString[s[i]])
		}
	}
	return sb.String()
}
