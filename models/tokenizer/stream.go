package tokenizer

import "strings"

// StreamDecoder decodes ids one at a time during generation and returns the
// text each id makes printable. It holds back text that could still change:
// a UTF-8 character whose bytes are split across tokens (text ending in
// U+FFFD waits for the next id), and the leading space SentencePiece
// decoders strip from the start of the text. What Add and Flush return adds
// up to Decode of all the ids, except where the ids spell bytes that are not
// valid UTF-8 (text already returned cannot be taken back). A StreamDecoder
// is not safe for concurrent use.
type StreamDecoder struct {
	t           *Tokenizer
	skipSpecial bool
	ids         []int  // ids decoded together: context, then pending ids
	context     int    // ids[:context] were returned already
	prefix      string // Decode(ids[:context])
}

// NewStreamDecoder returns a StreamDecoder that leaves out special tokens,
// the usual choice for showing generated text.
func (t *Tokenizer) NewStreamDecoder() *StreamDecoder {
	return &StreamDecoder{t: t, skipSpecial: true}
}

// NewStreamDecoderSpecial returns a StreamDecoder that, when keep is true,
// includes special tokens in its output.
func (t *Tokenizer) NewStreamDecoderSpecial(keep bool) *StreamDecoder {
	return &StreamDecoder{t: t, skipSpecial: !keep}
}

// Add feeds the next id and returns the text that became printable, which
// may be empty. It fails on an id that names no token, which is then
// ignored.
func (d *StreamDecoder) Add(id int) (string, error) {
	d.ids = append(d.ids, id)
	text, err := d.t.Decode(d.ids, d.skipSpecial)
	if err != nil {
		d.ids = d.ids[:len(d.ids)-1]
		return "", err
	}
	if len(text) <= len(d.prefix) || strings.HasSuffix(text, "\uFFFD") {
		return "", nil
	}
	out := d.pending(text)
	// The ids just returned become the context for the next ones: decoding
	// them together keeps the spaces between tokens.
	d.ids = append(d.ids[:0], d.ids[d.context:]...)
	d.context = len(d.ids)
	d.prefix, _ = d.t.Decode(d.ids, d.skipSpecial)
	return out, nil
}

// pending returns the text of the ids after the context, given text, the
// decoding of all of d.ids.
func (d *StreamDecoder) pending(text string) string {
	if strings.HasPrefix(text, d.prefix) {
		return text[len(d.prefix):]
	}
	// Invalid UTF-8 across the context boundary changed the context's own
	// text; decode the new ids on their own instead.
	out, _ := d.t.Decode(d.ids[d.context:], d.skipSpecial)
	return out
}

// Flush returns the text still held back (an incomplete UTF-8 sequence
// decodes to U+FFFD) and resets the decoder for a new sequence.
func (d *StreamDecoder) Flush() string {
	var out string
	if len(d.ids) > d.context {
		if text, err := d.t.Decode(d.ids, d.skipSpecial); err == nil && len(text) > len(d.prefix) {
			out = d.pending(text)
		}
	}
	d.ids, d.context, d.prefix = d.ids[:0], 0, ""
	return out
}
