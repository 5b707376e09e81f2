package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// addedToken is one entry of tokenizer.json's added_tokens.
type addedToken struct {
	id         int
	content    string
	singleWord bool
	lstrip     bool
	rstrip     bool
	normalized bool
	special    bool
}

// segment is a piece of text produced by splitting out added tokens: either
// an added token (id >= 0) or text to tokenize with the model (id == -1).
// start is the byte offset of the piece in the string that was split.
type segment struct {
	text  string
	start int
	id    int
}

// addedVocab finds added tokens in text. Tokens with normalized=false are
// matched against the raw text; those with normalized=true are matched, in
// their normalized form, against each normalized stretch of text between the
// first kind, as Hugging Face does.
type addedVocab struct {
	byContent map[string]int
	raw       *trie // tokens with normalized == false
	norm      *trie // tokens with normalized == true, keyed by normalized content
}

func newAddedVocab(tokens []*addedToken, n normalizer) *addedVocab {
	v := &addedVocab{
		byContent: make(map[string]int, len(tokens)),
		raw:       newTrie(),
		norm:      newTrie(),
	}
	for _, tok := range tokens {
		v.byContent[tok.content] = tok.id
		if !tok.normalized {
			v.raw.insert(tok.content, tok)
			continue
		}
		pattern := tok.content
		if n != nil {
			pattern = n.normalize(pattern)
		}
		if pattern != "" {
			v.norm.insert(pattern, tok)
		}
	}
	return v
}

// splitRaw appends to dst the pieces of text around the non-normalized added
// tokens. Empty pieces are dropped.
func (v *addedVocab) splitRaw(dst []segment, text string) []segment {
	return v.raw.split(dst, text)
}

// splitNormalized appends to dst the pieces of normalized text around the
// normalized added tokens. Empty pieces are dropped.
func (v *addedVocab) splitNormalized(dst []segment, text string) []segment {
	return v.norm.split(dst, text)
}

// trie is a byte trie over added-token contents, used for leftmost-longest
// matching (the semantics of the Aho-Corasick automaton Hugging Face uses).
type trie struct {
	edges map[uint64]int32 // node<<8 | byte -> child node
	term  []*addedToken    // node -> token ending there, or nil
	first [256]bool        // bytes that start some token
	empty bool
}

func newTrie() *trie {
	return &trie{edges: map[uint64]int32{}, term: []*addedToken{nil}, empty: true}
}

func (tr *trie) insert(s string, tok *addedToken) {
	tr.empty = false
	tr.first[s[0]] = true
	node := int32(0)
	for i := 0; i < len(s); i++ {
		key := uint64(node)<<8 | uint64(s[i])
		next, ok := tr.edges[key]
		if !ok {
			next = int32(len(tr.term))
			tr.term = append(tr.term, nil)
			tr.edges[key] = next
		}
		node = next
	}
	if tr.term[node] == nil {
		tr.term[node] = tok
	}
}

// longest returns the end of the longest token that starts at s[i], and the
// token, or -1 if none does.
func (tr *trie) longest(s string, i int) (int, *addedToken) {
	node := int32(0)
	end, found := -1, (*addedToken)(nil)
	for j := i; j < len(s); j++ {
		next, ok := tr.edges[uint64(node)<<8|uint64(s[j])]
		if !ok {
			break
		}
		node = next
		if t := tr.term[node]; t != nil {
			end, found = j+1, t
		}
	}
	return end, found
}

// split appends the pieces of s to dst: the added tokens found, and the text
// between them. It follows Hugging Face's AddedVocabulary::find_matches: a
// single_word token only counts when it is not inside a word; lstrip and
// rstrip make the token absorb the whitespace on that side.
func (tr *trie) split(dst []segment, s string) []segment {
	if tr.empty {
		if s != "" {
			dst = append(dst, segment{text: s, start: 0, id: -1})
		}
		return dst
	}
	startOffset := 0
	for i := 0; i < len(s); {
		if !tr.first[s[i]] {
			i++
			continue
		}
		end, tok := tr.longest(s, i)
		if tok == nil {
			i++
			continue
		}
		start, stop := i, end
		i = end
		if tok.singleWord {
			startSpace := start == 0 || !endsWithWordChar(s[:start])
			stopSpace := stop == len(s) || !startsWithWordChar(s[stop:])
			if !startSpace || !stopSpace {
				continue
			}
		}
		if tok.lstrip {
			newStart := start
			for newStart > 0 {
				r, size := utf8.DecodeLastRuneInString(s[:newStart])
				if !unicode.Is(unicode.White_Space, r) {
					break
				}
				newStart -= size
			}
			start = max(newStart, startOffset)
		}
		if tok.rstrip {
			for stop < len(s) {
				r, size := utf8.DecodeRuneInString(s[stop:])
				if !unicode.Is(unicode.White_Space, r) {
					break
				}
				stop += size
			}
			i = stop
		}
		if startOffset < start {
			dst = append(dst, segment{text: s[startOffset:start], start: startOffset, id: -1})
		}
		dst = append(dst, segment{text: s[start:stop], start: start, id: tok.id})
		startOffset = stop
	}
	if startOffset < len(s) {
		dst = append(dst, segment{text: s[startOffset:], start: startOffset, id: -1})
	}
	return dst
}

// isWordChar matches the regex class \w of Rust's regex crate: alphabetic,
// marks, decimal digits, connector punctuation and joiners.
func isWordChar(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsMark(r) || unicode.Is(unicode.Nd, r) ||
		unicode.Is(unicode.Pc, r) || unicode.Is(unicode.Nl, r) ||
		unicode.Is(unicode.Other_Alphabetic, r) || unicode.Is(unicode.Join_Control, r)
}

func endsWithWordChar(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return s != "" && isWordChar(r)
}

func startsWithWordChar(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return s != "" && isWordChar(r)
}
