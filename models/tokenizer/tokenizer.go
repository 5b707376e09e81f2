// Package tokenizer implements the Hugging Face tokenizer.json format for the
// BPE tokenizers used by Llama-family models.
//
// Two families are supported, and the test suite compares both against Hugging
// Face's own implementation on real files:
//
//   - byte-level BPE (GPT-2, Llama 3): a ByteLevel pre-tokenizer, either with
//     its built-in GPT-2 pattern or after a Split on the Llama 3 pattern, and a
//     ByteLevel decoder;
//   - SentencePiece-style BPE with byte fallback (Llama 2, Mistral,
//     TinyLlama): a Prepend("▁") + Replace(" " → "▁") normalizer or a
//     Metaspace pre-tokenizer, <0xXX> byte tokens, and the
//     Replace/ByteFallback/Fuse/Strip decoder chain.
//
// Added and special tokens are split out of the text before normalization,
// honouring their lstrip, rstrip, single_word and normalized flags. The
// TemplateProcessing post-processor supplies BOS when Encode is asked to add
// special tokens.
//
// A Tokenizer is immutable after loading and safe for concurrent use.
package tokenizer

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"unicode/utf8"
)

// FormatError reports a tokenizer.json that cannot be read: malformed JSON, a
// missing or invalid field, or a component this package does not implement.
type FormatError struct {
	// Source names the file (or other origin) the tokenizer came from.
	Source string
	// Field is the JSON path of the offending field, such as
	// "pre_tokenizer.pretokenizers[1].type". It is empty when the problem is
	// with the document as a whole.
	Field string
	// Msg describes the problem.
	Msg string
}

// Error implements the error interface.
func (e *FormatError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("tokenizer %s: %s", e.Source, e.Msg)
	}
	return fmt.Sprintf("tokenizer %s: field %s: %s", e.Source, e.Field, e.Msg)
}

// ErrInvalidUTF8 is returned by Encode for text that is not valid UTF-8.
var ErrInvalidUTF8 = errors.New("tokenizer: text is not valid UTF-8")

// Tokenizer turns text into token ids and back, following a Hugging Face
// tokenizer.json. Create one with Load or Parse. All methods are safe for
// concurrent use.
type Tokenizer struct {
	source string

	model      *bpe
	added      *addedVocab
	normalizer normalizer   // nil: none
	pre        preTokenizer // nil: none
	post       *template    // nil: no post-processing
	decoder    decoder      // nil: tokens joined by spaces

	idToToken []string // id -> token text; "" where no token has that id
	hasToken  []bool   // id -> whether idToToken[id] is a real token
	special   []bool   // id -> whether the token is a special added token
}

// Load reads and parses a tokenizer.json file.
func Load(path string) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return Parse(data, path)
}

// Encode converts text to token ids. With addSpecial, the tokenizer's
// post-processor is applied, which for Llama models prepends BOS.
//
// Text that spells out an added or special token (such as "<s>" or
// "<|eot_id|>") is encoded as that token, as Hugging Face does by default.
// Encode fails only when text is not valid UTF-8.
func (t *Tokenizer) Encode(text string, addSpecial bool) ([]int, error) {
	if !utf8.ValidString(text) {
		return nil, ErrInvalidUTF8
	}
	ids := t.encodeBody(make([]int, 0, len(text)/3+4), text)
	if addSpecial && t.post != nil {
		return t.post.apply(make([]int, 0, len(ids)+4), ids), nil
	}
	return ids, nil
}

// encodeBody appends the ids of text, without post-processing, to dst.
func (t *Tokenizer) encodeBody(dst []int, text string) []int {
	emit := func(w piece) { dst = t.model.tokenize(dst, w.text) }
	for _, seg := range t.added.splitRaw(nil, text) {
		if seg.id >= 0 {
			dst = append(dst, seg.id)
			continue
		}
		s := seg.text
		if t.normalizer != nil {
			s = t.normalizer.normalize(s)
		}
		for _, sub := range t.added.splitNormalized(nil, s) {
			if sub.id >= 0 {
				dst = append(dst, sub.id)
				continue
			}
			p := piece{text: sub.text, first: seg.start == 0 && sub.start == 0}
			if t.pre == nil {
				emit(p)
			} else {
				t.pre.preTokenize(p, emit)
			}
		}
	}
	return dst
}

// Decode converts token ids back to text with the tokenizer's decoder. With
// skipSpecial, special tokens (BOS, EOS, ...) are left out. Byte sequences
// that are not valid UTF-8 decode to U+FFFD, as in Hugging Face. Decode fails
// on an id that names no token.
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) (string, error) {
	tokens := make([]string, 0, len(ids))
	for _, id := range ids {
		if id < 0 || id >= len(t.idToToken) || !t.hasToken[id] {
			return "", fmt.Errorf("tokenizer: decode: id %d is not in the vocabulary", id)
		}
		if skipSpecial && t.special[id] {
			continue
		}
		tokens = append(tokens, t.idToToken[id])
	}
	if t.decoder == nil {
		return strings.Join(tokens, " "), nil
	}
	return strings.Join(t.decoder.decodeChain(tokens), ""), nil
}

// TokenID returns the id of the token whose text is s (an added token or an
// entry of the model's vocabulary, as spelled in tokenizer.json).
func (t *Tokenizer) TokenID(s string) (int, bool) {
	if id, ok := t.added.byContent[s]; ok {
		return id, true
	}
	id, ok := t.model.vocab[s]
	return id, ok
}

// Token returns the text of token id as spelled in tokenizer.json: for
// byte-level vocabularies the byte-mapped form (e.g. "Ġthe"), for
// SentencePiece ones with "▁" for spaces. An added token with
// normalized=true is returned in normalized form, which is what Decode
// uses.
func (t *Tokenizer) Token(id int) (string, bool) {
	if id < 0 || id >= len(t.idToToken) || !t.hasToken[id] {
		return "", false
	}
	return t.idToToken[id], true
}

// IsSpecial reports whether id is a special added token, one that Decode
// drops when asked to skip special tokens.
func (t *Tokenizer) IsSpecial(id int) bool {
	return id >= 0 && id < len(t.special) && t.special[id]
}

// VocabSize returns one more than the largest token id, counting both the
// model's vocabulary and the added tokens: the number of rows an embedding
// table indexed by these ids needs.
func (t *Tokenizer) VocabSize() int {
	return len(t.idToToken)
}

// BOS returns the id that the post-processor puts before the text, if it
// puts exactly one special token there.
func (t *Tokenizer) BOS() (int, bool) {
	if t.post == nil {
		return 0, false
	}
	return t.post.bos()
}

// Source returns the name the tokenizer was loaded from (the file path for
// Load, the source argument for Parse).
func (t *Tokenizer) Source() string {
	return t.source
}
