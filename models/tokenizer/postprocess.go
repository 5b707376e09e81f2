package tokenizer

// template is the single-sequence form of a TemplateProcessing
// post-processor: a list of items, each either fixed special-token ids or
// the encoded text itself.
type template struct {
	items []templateItem
}

// templateItem is one element of a template: ids to insert, or (when
// sequence is set) the encoded text.
type templateItem struct {
	ids      []int
	sequence bool
}

// apply appends the template, with body in place of the sequence, to dst.
func (t *template) apply(dst, body []int) []int {
	for _, it := range t.items {
		if it.sequence {
			dst = append(dst, body...)
		} else {
			dst = append(dst, it.ids...)
		}
	}
	return dst
}

// bos returns the single special token the template puts first, if any.
func (t *template) bos() (int, bool) {
	if len(t.items) == 0 || t.items[0].sequence || len(t.items[0].ids) != 1 {
		return 0, false
	}
	return t.items[0].ids[0], true
}
