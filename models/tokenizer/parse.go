package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Parse builds a Tokenizer from the contents of a tokenizer.json. source
// names the data in error messages (usually the file path).
//
// Supported components:
//
//   - model: BPE (vocab; merges as "a b" strings or ["a", "b"] pairs;
//     unk_token, fuse_unk, byte_fallback, ignore_merges);
//   - normalizer: Sequence, Prepend, Replace, NFC, NFD, NFKC, NFKD;
//   - pre_tokenizer: Sequence, Split, ByteLevel, Metaspace;
//   - post_processor: TemplateProcessing, ByteLevel, Sequence;
//   - decoder: Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip,
//     Metaspace.
//
// Anything else is reported as a *FormatError naming the field.
func Parse(data []byte, source string) (*Tokenizer, error) {
	p := &parser{source: source}
	var doc struct {
		AddedTokens   json.RawMessage `json:"added_tokens"`
		Normalizer    json.RawMessage `json:"normalizer"`
		PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
		PostProcessor json.RawMessage `json:"post_processor"`
		Decoder       json.RawMessage `json:"decoder"`
		Model         *modelJSON      `json:"model"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, p.errf("", "not valid tokenizer.json: %v", err)
	}
	t := &Tokenizer{source: source}
	var err error
	if t.model, err = p.model(doc.Model); err != nil {
		return nil, err
	}
	if t.normalizer, err = p.normalizer(doc.Normalizer, "normalizer"); err != nil {
		return nil, err
	}
	if t.pre, err = p.preTokenizer(doc.PreTokenizer, "pre_tokenizer"); err != nil {
		return nil, err
	}
	if t.decoder, err = p.decoder(doc.Decoder, "decoder"); err != nil {
		return nil, err
	}
	added, err := p.addedTokens(doc.AddedTokens, t.model)
	if err != nil {
		return nil, err
	}
	t.added = newAddedVocab(added, t.normalizer)
	if t.post, err = p.postProcessor(doc.PostProcessor, "post_processor", t); err != nil {
		return nil, err
	}
	if t.post != nil && len(t.post.items) == 1 && t.post.items[0].sequence {
		t.post = nil // the identity
	}

	size := 0
	for _, id := range t.model.vocab {
		size = max(size, id+1)
	}
	for _, tok := range added {
		size = max(size, tok.id+1)
	}
	t.idToToken = make([]string, size)
	t.hasToken = make([]bool, size)
	t.special = make([]bool, size)
	for s, id := range t.model.vocab {
		t.idToToken[id] = s
		t.hasToken[id] = true
	}
	for _, tok := range added {
		// Like Hugging Face, a normalized added token decodes as its
		// normalized form (so SentencePiece's "▁" prefix becomes a space).
		t.idToToken[tok.id] = tok.content
		if tok.normalized && t.normalizer != nil {
			t.idToToken[tok.id] = t.normalizer.normalize(tok.content)
		}
		t.hasToken[tok.id] = true
		t.special[tok.id] = tok.special
	}
	return t, nil
}

// parser carries the source name for error messages.
type parser struct {
	source string
}

func (p *parser) errf(field, format string, args ...any) error {
	return &FormatError{Source: p.source, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// object is a JSON object being read, with its path for error messages.
type object struct {
	p    *parser
	path string
	m    map[string]json.RawMessage
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// object decodes raw as a JSON object; it returns nil for null or absent.
func (p *parser) object(raw json.RawMessage, path string) (*object, error) {
	if isNull(raw) {
		return nil, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, p.errf(path, "expected an object: %v", err)
	}
	return &object{p: p, path: path, m: m}, nil
}

func (o *object) field(key string) string {
	if o.path == "" {
		return key
	}
	return o.path + "." + key
}

func (o *object) has(key string) bool {
	raw, ok := o.m[key]
	return ok && !isNull(raw)
}

// get decodes o[key] into v; absent or null leaves v unchanged, and
// required makes that an error.
func (o *object) get(key string, v any, required bool) error {
	raw, ok := o.m[key]
	if !ok || isNull(raw) {
		if required {
			return o.p.errf(o.field(key), "missing")
		}
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return o.p.errf(o.field(key), "invalid value %s: %v", abbreviate(raw), err)
	}
	return nil
}

// component decodes raw as a component object (a normalizer,
// pre-tokenizer, decoder or post-processor) and returns it with its
// required "type" field; it returns a nil object for null or absent.
func (p *parser) component(raw json.RawMessage, path string) (*object, string, error) {
	o, err := p.object(raw, path)
	if err != nil || o == nil {
		return nil, "", err
	}
	var typ string
	if err := o.get("type", &typ, true); err != nil {
		return nil, "", err
	}
	return o, typ, nil
}

// list returns the elements of the array o[key].
func (o *object) list(key string) ([]json.RawMessage, error) {
	var items []json.RawMessage
	if err := o.get(key, &items, true); err != nil {
		return nil, err
	}
	return items, nil
}

func abbreviate(raw json.RawMessage) string {
	s := string(raw)
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}

func unsupported(p *parser, field, kind, typ string, supported ...string) error {
	return p.errf(field, "unsupported %s type %q (supported: %s)", kind, typ, strings.Join(supported, ", "))
}

// modelJSON is the "model" section. It is decoded in the same pass as the
// rest of the document, since its vocabulary and merges make up nearly all
// of a large tokenizer.json.
type modelJSON struct {
	Type                    string          `json:"type"`
	Dropout                 *float64        `json:"dropout"`
	UnkToken                *string         `json:"unk_token"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	FuseUnk                 *bool           `json:"fuse_unk"`
	ByteFallback            *bool           `json:"byte_fallback"`
	IgnoreMerges            *bool           `json:"ignore_merges"`
	Vocab                   map[string]int  `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
}

// model builds the BPE model from the "model" section.
func (p *parser) model(mj *modelJSON) (*bpe, error) {
	if mj == nil {
		return nil, p.errf("model", "missing")
	}
	typ := mj.Type
	if typ == "" && !isNull(mj.Merges) {
		typ = "BPE" // files written before "type" existed
	}
	if typ != "BPE" {
		return nil, unsupported(p, "model.type", "model", typ, "BPE")
	}
	if d := mj.Dropout; d != nil && *d != 0 && *d != 1 {
		return nil, p.errf("model.dropout", "BPE dropout %v is not supported (encoding must be deterministic)", *d)
	}
	if s := mj.ContinuingSubwordPrefix; s != nil && *s != "" {
		return nil, p.errf("model.continuing_subword_prefix", "%q is not supported", *s)
	}
	if s := mj.EndOfWordSuffix; s != nil && *s != "" {
		return nil, p.errf("model.end_of_word_suffix", "%q is not supported", *s)
	}
	if mj.Vocab == nil {
		return nil, p.errf("model.vocab", "missing")
	}
	m := &bpe{vocab: mj.Vocab, unkID: -1, cache: map[string][]int32{}}
	// Ids index a table: they must be distinct (else which token an id
	// decodes to would depend on map order) and dense enough that a stray
	// huge id cannot make a small file allocate gigabytes.
	limit := 2*len(m.vocab) + 1024
	owner := make(map[int]string, len(m.vocab))
	for s, id := range m.vocab {
		if id < 0 || id > limit {
			return nil, p.errf("model.vocab", "token %q has id %d, outside [0, %d] for a vocabulary of %d tokens", s, id, limit, len(m.vocab))
		}
		if other, dup := owner[id]; dup {
			a, b := min(s, other), max(s, other)
			return nil, p.errf("model.vocab", "tokens %q and %q share id %d", a, b, id)
		}
		owner[id] = s
	}
	m.fuseUnk = mj.FuseUnk != nil && *mj.FuseUnk
	m.byteFallback = mj.ByteFallback != nil && *mj.ByteFallback
	m.ignoreMerges = mj.IgnoreMerges != nil && *mj.IgnoreMerges
	if mj.UnkToken != nil && *mj.UnkToken != "" {
		id, ok := m.vocab[*mj.UnkToken]
		if !ok {
			return nil, p.errf("model.unk_token", "%q is not in the vocabulary", *mj.UnkToken)
		}
		m.unkID = id
	}
	m.indexRunes()
	for b := 0; b < 256; b++ {
		m.byteIDs[b] = -1
		if id, ok := m.vocab[fmt.Sprintf("<0x%02X>", b)]; ok {
			m.byteIDs[b] = int32(id)
		}
	}
	var err error
	if m.merges, err = p.merges(mj.Merges, m.vocab); err != nil {
		return nil, err
	}
	return m, nil
}

// merges reads model.merges in either of its two forms: "a b" strings or
// ["a", "b"] pairs.
func (p *parser) merges(raw json.RawMessage, vocab map[string]int) (map[uint64]merge, error) {
	const field = "model.merges"
	var pairs [][2]string
	if !isNull(raw) {
		// The first element decides the form.
		rest, _ := bytes.CutPrefix(bytes.TrimSpace(raw), []byte("["))
		rest = bytes.TrimSpace(rest)
		if len(rest) > 0 && rest[0] == '[' {
			var asPairs [][]string
			if err := json.Unmarshal(raw, &asPairs); err != nil {
				return nil, p.errf(field, "expected a list of \"a b\" strings or of [\"a\", \"b\"] pairs: %v", err)
			}
			pairs = make([][2]string, len(asPairs))
			for i, pr := range asPairs {
				if len(pr) != 2 {
					return nil, p.errf(fmt.Sprintf("%s[%d]", field, i), "a merge pair needs 2 tokens, not %d", len(pr))
				}
				pairs[i] = [2]string{pr[0], pr[1]}
			}
		} else {
			var asStrings []string
			if err := json.Unmarshal(raw, &asStrings); err != nil {
				return nil, p.errf(field, "expected a list of \"a b\" strings or of [\"a\", \"b\"] pairs: %v", err)
			}
			pairs = make([][2]string, len(asStrings))
			for i, s := range asStrings {
				a, b, ok := strings.Cut(s, " ")
				if !ok || strings.Contains(b, " ") {
					return nil, p.errf(fmt.Sprintf("%s[%d]", field, i), "merge %q is not two tokens separated by a space", s)
				}
				pairs[i] = [2]string{a, b}
			}
		}
	}
	merges := make(map[uint64]merge, len(pairs))
	for i, pr := range pairs {
		a, okA := vocab[pr[0]]
		b, okB := vocab[pr[1]]
		n, okN := vocab[pr[0]+pr[1]]
		if !okA || !okB || !okN {
			missing := pr[0]
			switch {
			case !okA:
			case !okB:
				missing = pr[1]
			default:
				missing = pr[0] + pr[1]
			}
			return nil, p.errf(fmt.Sprintf("%s[%d]", field, i), "token %q of merge %q + %q is not in the vocabulary", missing, pr[0], pr[1])
		}
		merges[pairKey(int32(a), int32(b))] = merge{rank: int32(i), newID: int32(n)}
	}
	return merges, nil
}

// addedTokens reads the "added_tokens" list.
func (p *parser) addedTokens(raw json.RawMessage, model *bpe) ([]*addedToken, error) {
	if isNull(raw) {
		return nil, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, p.errf("added_tokens", "expected a list: %v", err)
	}
	out := make([]*addedToken, 0, len(items))
	for i, item := range items {
		o, err := p.object(item, fmt.Sprintf("added_tokens[%d]", i))
		if err != nil {
			return nil, err
		}
		if o == nil {
			return nil, p.errf(fmt.Sprintf("added_tokens[%d]", i), "null entry")
		}
		tok := &addedToken{normalized: true}
		if err := o.get("id", &tok.id, true); err != nil {
			return nil, err
		}
		if tok.id < 0 || tok.id > 1<<30 {
			return nil, p.errf(o.field("id"), "invalid id %d", tok.id)
		}
		if err := o.get("content", &tok.content, true); err != nil {
			return nil, err
		}
		for key, dst := range map[string]*bool{
			"single_word": &tok.singleWord, "lstrip": &tok.lstrip, "rstrip": &tok.rstrip,
			"normalized": &tok.normalized, "special": &tok.special,
		} {
			if err := o.get(key, dst, false); err != nil {
				return nil, err
			}
		}
		if tok.content == "" {
			continue // ignored, as in Hugging Face
		}
		out = append(out, tok)
	}
	assignAddedIDs(out, model)
	return out, nil
}

// assignAddedIDs gives the added tokens the ids Hugging Face gives them when
// it loads a file (AddedVocabulary::add_tokens): a token already in the
// model's vocabulary, or added before, keeps that id; any other takes the
// next id after the model's vocabulary and the added tokens so far. The
// "id" fields of the file agree with this for files Hugging Face wrote.
func assignAddedIDs(tokens []*addedToken, model *bpe) {
	vocabSize := len(model.vocab)
	assigned := map[string]int{}
	maxID := -1
	for _, tok := range tokens {
		if id, ok := assigned[tok.content]; ok {
			tok.id = id
		} else if id, ok := model.vocab[tok.content]; ok {
			tok.id = id
		} else {
			switch {
			case maxID < 0:
				tok.id = vocabSize
			case maxID >= vocabSize || vocabSize == 0:
				tok.id = maxID + 1
			default:
				tok.id = vocabSize
			}
		}
		assigned[tok.content] = tok.id
		maxID = max(maxID, tok.id)
	}
}

// pattern reads a {"String": ...} or {"Regex": ...} pattern.
func (p *parser) pattern(raw json.RawMessage, path string) (matcher, error) {
	o, err := p.object(raw, path)
	if err != nil {
		return nil, err
	}
	if o == nil {
		return nil, p.errf(path, "missing")
	}
	var s string
	switch {
	case o.has("String"):
		if err := o.get("String", &s, true); err != nil {
			return nil, err
		}
		if s == "" {
			return nil, p.errf(o.field("String"), "empty pattern")
		}
		return literalMatcher(s), nil
	case o.has("Regex"):
		if err := o.get("Regex", &s, true); err != nil {
			return nil, err
		}
		m, err := compileRegex(s)
		if err != nil {
			return nil, p.errf(o.field("Regex"), "cannot compile %q: %v", s, err)
		}
		return m, nil
	}
	return nil, p.errf(path, "expected a String or Regex pattern")
}

// replace reads the pattern and content of a Replace normalizer or decoder.
func (p *parser) replace(o *object) (matcher, string, error) {
	pat, err := p.pattern(o.m["pattern"], o.field("pattern"))
	if err != nil {
		return nil, "", err
	}
	var content string
	if err := o.get("content", &content, true); err != nil {
		return nil, "", err
	}
	return pat, content, nil
}

// parseSequence parses o[key], a list of components, with parse (which
// reports errors under the item's path); components that parse to nil are
// left out.
func parseSequence[T any](o *object, key string, parse func(json.RawMessage, string) (T, error)) ([]T, error) {
	items, err := o.list(key)
	if err != nil {
		return nil, err
	}
	var out []T
	for i, item := range items {
		x, err := parse(item, fmt.Sprintf("%s[%d]", o.field(key), i))
		if err != nil {
			return nil, err
		}
		if any(x) != nil {
			out = append(out, x)
		}
	}
	return out, nil
}

// parseComponent reads a component of one kind (normalizer, pre-tokenizer
// or decoder): null or absent is the zero T; type "Sequence" is the list
// o[seqKey] of components of the same kind, joined by seq; any other type
// goes to byType.
func parseComponent[T any](p *parser, raw json.RawMessage, path, seqKey string, seq func([]T) T, byType func(*object, string) (T, error)) (T, error) {
	var zero T
	o, typ, err := p.component(raw, path)
	if err != nil || o == nil {
		return zero, err
	}
	if typ == "Sequence" {
		items, err := parseSequence(o, seqKey, func(raw json.RawMessage, path string) (T, error) {
			return parseComponent(p, raw, path, seqKey, seq, byType)
		})
		return seq(items), err
	}
	return byType(o, typ)
}

func (p *parser) normalizer(raw json.RawMessage, path string) (normalizer, error) {
	return parseComponent(p, raw, path, "normalizers", func(seq []normalizer) normalizer { return sequenceNormalizer(seq) }, p.normalizerOf)
}

func (p *parser) normalizerOf(o *object, typ string) (normalizer, error) {
	switch typ {
	case "Prepend":
		var s string
		if err := o.get("prepend", &s, true); err != nil {
			return nil, err
		}
		return prependNormalizer{prefix: s}, nil
	case "Replace":
		pat, content, err := p.replace(o)
		if err != nil {
			return nil, err
		}
		return replaceNormalizer{pattern: pat, content: content}, nil
	case "NFC":
		return unicodeNormalizer{form: norm.NFC}, nil
	case "NFD":
		return unicodeNormalizer{form: norm.NFD}, nil
	case "NFKC":
		return unicodeNormalizer{form: norm.NFKC}, nil
	case "NFKD":
		return unicodeNormalizer{form: norm.NFKD}, nil
	}
	return nil, unsupported(p, o.field("type"), "normalizer", typ, "Sequence", "Prepend", "Replace", "NFC", "NFD", "NFKC", "NFKD")
}

func (p *parser) preTokenizer(raw json.RawMessage, path string) (preTokenizer, error) {
	return parseComponent(p, raw, path, "pretokenizers", func(seq []preTokenizer) preTokenizer { return sequencePre(seq) }, p.preTokenizerOf)
}

func (p *parser) preTokenizerOf(o *object, typ string) (preTokenizer, error) {
	switch typ {
	case "Split":
		pat, err := p.pattern(o.m["pattern"], o.field("pattern"))
		if err != nil {
			return nil, err
		}
		var behavior string
		if err := o.get("behavior", &behavior, true); err != nil {
			return nil, err
		}
		b, ok := splitBehaviors[behavior]
		if !ok {
			return nil, p.errf(o.field("behavior"), "unknown split behavior %q", behavior)
		}
		sp := splitPre{pattern: pat, behavior: b}
		if err := o.get("invert", &sp.invert, false); err != nil {
			return nil, err
		}
		if m, ok := pat.(regexMatcher); ok {
			sp.pattern = fastPath(m, o)
		}
		return sp, nil
	case "ByteLevel":
		b := byteLevelPre{}
		useRegex := true
		if err := o.get("add_prefix_space", &b.addPrefixSpace, false); err != nil {
			return nil, err
		}
		if err := o.get("use_regex", &useRegex, false); err != nil {
			return nil, err
		}
		if useRegex {
			b.split = gpt2Matcher
		}
		return b, nil
	case "Metaspace":
		m := metaspacePre{split: true}
		rep, scheme, err := p.metaspace(o)
		if err != nil {
			return nil, err
		}
		m.replacement, m.prepend = string(rep), scheme
		if err := o.get("split", &m.split, false); err != nil {
			return nil, err
		}
		return m, nil
	}
	return nil, unsupported(p, o.field("type"), "pre-tokenizer", typ, "Sequence", "Split", "ByteLevel", "Metaspace")
}

// metaspace reads the replacement character and prepend scheme shared by
// the Metaspace pre-tokenizer and decoder, including the older
// add_prefix_space form.
func (p *parser) metaspace(o *object) (rune, prependScheme, error) {
	rep := "▁"
	if err := o.get("replacement", &rep, false); err != nil {
		return 0, 0, err
	}
	r, size := utf8.DecodeRuneInString(rep)
	if size == 0 || size != len(rep) {
		return 0, 0, p.errf(o.field("replacement"), "must be a single character, not %q", rep)
	}
	if o.has("prepend_scheme") {
		var s string
		if err := o.get("prepend_scheme", &s, true); err != nil {
			return 0, 0, err
		}
		scheme, ok := prependSchemes[s]
		if !ok {
			return 0, 0, p.errf(o.field("prepend_scheme"), "unknown prepend scheme %q", s)
		}
		return r, scheme, nil
	}
	addPrefix := true
	if err := o.get("add_prefix_space", &addPrefix, false); err != nil {
		return 0, 0, err
	}
	if addPrefix {
		return r, prependAlways, nil
	}
	return r, prependNever, nil
}

func (p *parser) decoder(raw json.RawMessage, path string) (decoder, error) {
	return parseComponent(p, raw, path, "decoders", func(seq []decoder) decoder { return sequenceDecoder(seq) }, p.decoderOf)
}

func (p *parser) decoderOf(o *object, typ string) (decoder, error) {
	switch typ {
	case "ByteLevel":
		return byteLevelDecoder{}, nil
	case "ByteFallback":
		return byteFallbackDecoder{}, nil
	case "Fuse":
		return fuseDecoder{}, nil
	case "Replace":
		pat, content, err := p.replace(o)
		if err != nil {
			return nil, err
		}
		return replaceDecoder{pattern: pat, content: content}, nil
	case "Strip":
		var d stripDecoder
		var content string
		if err := o.get("content", &content, true); err != nil {
			return nil, err
		}
		r, size := utf8.DecodeRuneInString(content)
		if size == 0 || size != len(content) {
			return nil, p.errf(o.field("content"), "must be a single character, not %q", content)
		}
		d.content = r
		if err := o.get("start", &d.start, false); err != nil {
			return nil, err
		}
		if err := o.get("stop", &d.stop, false); err != nil {
			return nil, err
		}
		return d, nil
	case "Metaspace":
		rep, scheme, err := p.metaspace(o)
		if err != nil {
			return nil, err
		}
		return metaspaceDecoder{replacement: rep, prepend: scheme}, nil
	}
	return nil, unsupported(p, o.field("type"), "decoder", typ,
		"Sequence", "ByteLevel", "ByteFallback", "Fuse", "Replace", "Strip", "Metaspace")
}

// postProcessor reads the post-processor into a single-sequence template.
func (p *parser) postProcessor(raw json.RawMessage, path string, t *Tokenizer) (*template, error) {
	o, typ, err := p.component(raw, path)
	if err != nil || o == nil {
		return nil, err
	}
	switch typ {
	case "ByteLevel":
		return nil, nil // only adjusts offsets, which this package does not report
	case "Sequence":
		items, err := o.list("processors")
		if err != nil {
			return nil, err
		}
		// Later processors wrap the output of earlier ones.
		combined := &template{items: []templateItem{{sequence: true}}}
		for i, item := range items {
			next, err := p.postProcessor(item, fmt.Sprintf("%s[%d]", o.field("processors"), i), t)
			if err != nil {
				return nil, err
			}
			if next != nil {
				combined = compose(next, combined)
			}
		}
		return combined, nil
	case "TemplateProcessing":
		return p.template(o, t)
	}
	return nil, unsupported(p, o.field("type"), "post-processor", typ, "TemplateProcessing", "ByteLevel", "Sequence")
}

// compose returns the template that applies inner, then outer.
func compose(outer, inner *template) *template {
	var items []templateItem
	for _, it := range outer.items {
		if it.sequence {
			items = append(items, inner.items...)
		} else {
			items = append(items, it)
		}
	}
	return &template{items: items}
}

func (p *parser) template(o *object, t *Tokenizer) (*template, error) {
	var specials map[string]struct {
		IDs []int `json:"ids"`
	}
	if err := o.get("special_tokens", &specials, false); err != nil {
		return nil, err
	}
	items, err := o.list("single")
	if err != nil {
		return nil, err
	}
	tmpl := &template{}
	for i, item := range items {
		path := fmt.Sprintf("%s[%d]", o.field("single"), i)
		var it map[string]struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(item, &it); err != nil || len(it) != 1 {
			return nil, p.errf(path, "expected {\"SpecialToken\": {...}} or {\"Sequence\": {...}}")
		}
		if seq, ok := it["Sequence"]; ok {
			if seq.ID != "A" {
				return nil, p.errf(path, "single-sequence template refers to sequence %q", seq.ID)
			}
			tmpl.items = append(tmpl.items, templateItem{sequence: true})
			continue
		}
		sp, ok := it["SpecialToken"]
		if !ok {
			keys := make([]string, 0, len(it))
			for k := range it {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			return nil, p.errf(path, "unknown template item %q", keys[0])
		}
		ids := []int(nil)
		if st, ok := specials[sp.ID]; ok {
			ids = st.IDs
		} else if id, ok := t.TokenID(sp.ID); ok {
			ids = []int{id}
		} else {
			return nil, p.errf(path, "special token %q is not defined in special_tokens", sp.ID)
		}
		tmpl.items = append(tmpl.items, templateItem{ids: ids})
	}
	return tmpl, nil
}
