package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// Message is one message of a conversation.
type Message struct {
	// Role is "system", "user", "assistant", "tool", ...
	Role string
	// Content is the message text (used when Raw is nil).
	Content string
	// Raw, when set, is the whole message object as given (with
	// tool_calls, reasoning_content, content parts, ...); the template sees
	// its fields in their order.
	Raw json.RawMessage
}

// ParseMessages reads an OpenAI-style messages array: a JSON array of
// objects, each with a string "role" and a "content" that is a string, a
// list of content parts, or null. Other fields are passed to the template
// as they are.
func ParseMessages(data []byte) ([]Message, error) {
	var items []json.RawMessage
	if err := json.Unmarshal(data, &items); err != nil {
		return nil, fmt.Errorf("messages: expected a JSON array of message objects: %v", err)
	}
	if len(items) == 0 {
		return nil, errors.New("messages: the array is empty")
	}
	out := make([]Message, len(items))
	for i, raw := range items {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil || m == nil {
			return nil, fmt.Errorf("messages[%d]: expected an object with a role and a content", i)
		}
		var role string
		if err := json.Unmarshal(m["role"], &role); err != nil || role == "" {
			return nil, fmt.Errorf("messages[%d]: role must be a non-empty string", i)
		}
		content, ok := m["content"]
		if !ok {
			return nil, fmt.Errorf("messages[%d] (%s): content is missing", i, role)
		}
		content = bytes.TrimSpace(content)
		if len(content) == 0 || (content[0] != '"' && content[0] != '[' && string(content) != "null") {
			return nil, fmt.Errorf("messages[%d] (%s): content must be a string, a list of parts or null", i, role)
		}
		var text string
		_ = json.Unmarshal(content, &text)
		out[i] = Message{Role: role, Content: text, Raw: raw}
	}
	return out, nil
}

func (m Message) value() (jinja.Value, error) {
	if m.Raw != nil {
		return fromJSON(m.Raw)
	}
	d := jinja.NewDict()
	d.AsDict().Set("role", jinja.NewString(m.Role))
	d.AsDict().Set("content", jinja.NewString(m.Content))
	return d, nil
}

// fromJSON converts a JSON value to a template value, keeping the order of
// object keys (as Python's json.load does) and integers distinct from
// floats.
func fromJSON(raw json.RawMessage) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return jinja.Undefined(), err
	}
	if _, err := dec.Token(); err == nil {
		return jinja.Undefined(), errors.New("trailing data after the JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Undefined(), err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '[':
			var items []jinja.Value
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return jinja.Undefined(), err
				}
				items = append(items, v)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Undefined(), err
			}
			return jinja.NewList(items), nil
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return jinja.Undefined(), err
				}
				v, err := decodeValue(dec)
				if err != nil {
					return jinja.Undefined(), err
				}
				d.AsDict().Set(k.(string), v)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Undefined(), err
			}
			return d, nil
		}
	case json.Number:
		s := string(t)
		if !strings.ContainsAny(s, ".eE") {
			if i, err := t.Int64(); err == nil {
				return jinja.NewInt(i), nil
			}
		}
		f, err := t.Float64()
		if err != nil {
			return jinja.Undefined(), fmt.Errorf("number %s: %v", s, err)
		}
		return jinja.NewFloat(f), nil
	case string:
		return jinja.NewString(t), nil
	case bool:
		return jinja.NewBool(t), nil
	case nil:
		return jinja.None(), nil
	}
	return jinja.Undefined(), fmt.Errorf("unexpected JSON token %v", tok)
}

// dumpOptions are json.dumps's keyword arguments.
type dumpOptions struct {
	ensureASCII bool
	indent      string // "" with hasIndent: newlines without indentation
	hasIndent   bool
	itemSep     string
	keySep      string
	sortKeys    bool
}

// filterToJSON is transformers' tojson filter:
// json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
func filterToJSON(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), errors.New("tojson: no value")
	}
	opt := dumpOptions{}
	names := []string{"ensure_ascii", "indent", "separators", "sort_keys"}
	given := map[string]jinja.Value{}
	for i, a := range args[1:] {
		if i >= len(names) {
			return jinja.Undefined(), errors.New("tojson: too many arguments")
		}
		given[names[i]] = a
	}
	for k, v := range kwargs {
		if !contains(names, k) {
			return jinja.Undefined(), fmt.Errorf("tojson: unexpected argument %q", k)
		}
		given[k] = v
	}
	if v, ok := given["ensure_ascii"]; ok {
		opt.ensureASCII = v.IsTruthy()
	}
	if v, ok := given["indent"]; ok && !v.IsNone() && !v.IsUndefined() {
		opt.hasIndent = true
		switch {
		case v.IsInt():
			opt.indent = strings.Repeat(" ", int(max(v.AsInt(), 0)))
		case v.IsString():
			opt.indent = v.AsString()
		default:
			return jinja.Undefined(), errors.New("tojson: indent must be an integer or a string")
		}
	}
	opt.itemSep, opt.keySep = ", ", ": "
	if opt.hasIndent {
		opt.itemSep = ","
	}
	if v, ok := given["separators"]; ok && !v.IsNone() && !v.IsUndefined() {
		if !v.IsList() || v.AsList().Len() != 2 || !v.AsList().Get(0).IsString() || !v.AsList().Get(1).IsString() {
			return jinja.Undefined(), errors.New("tojson: separators must be two strings")
		}
		opt.itemSep, opt.keySep = v.AsList().Get(0).AsString(), v.AsList().Get(1).AsString()
	}
	if v, ok := given["sort_keys"]; ok {
		opt.sortKeys = v.IsTruthy()
	}
	s, err := dumps(args[0], opt)
	if err != nil {
		return jinja.Undefined(), err
	}
	return jinja.NewString(s), nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// dumps writes v as Python's json.dumps does.
func dumps(v jinja.Value, opt dumpOptions) (string, error) {
	var b strings.Builder
	if err := dumpValue(&b, v, opt, 0); err != nil {
		return "", err
	}
	return b.String(), nil
}

func dumpValue(b *strings.Builder, v jinja.Value, opt dumpOptions, depth int) error {
	newline := func(d int) {
		if opt.hasIndent {
			b.WriteByte('\n')
			for range d {
				b.WriteString(opt.indent)
			}
		}
	}
	switch {
	case v.IsNone():
		b.WriteString("null")
	case v.IsBool():
		if v.AsBool() {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case v.IsInt():
		b.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		b.WriteString(pyFloat(v.AsFloat()))
	case v.IsString():
		writeString(b, v.AsString(), opt.ensureASCII)
	case v.IsList():
		items := v.AsList().Items
		if len(items) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, item := range items {
			if i > 0 {
				b.WriteString(opt.itemSep)
			}
			newline(depth + 1)
			if err := dumpValue(b, item, opt, depth+1); err != nil {
				return err
			}
		}
		newline(depth)
		b.WriteByte(']')
	case v.IsDict():
		d := v.AsDict()
		keys := d.OrderedKeys()
		if len(keys) == 0 {
			b.WriteString("{}")
			return nil
		}
		if opt.sortKeys {
			sort.Strings(keys)
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(opt.itemSep)
			}
			newline(depth + 1)
			writeString(b, k, opt.ensureASCII)
			b.WriteString(opt.keySep)
			val, _ := d.Get(k)
			if err := dumpValue(b, val, opt, depth+1); err != nil {
				return err
			}
		}
		newline(depth)
		b.WriteByte('}')
	case v.IsUndefined():
		return errors.New("tojson: the value is undefined")
	default:
		return fmt.Errorf("tojson: cannot serialize %s", v.String())
	}
	return nil
}

// pyFloat formats f as Python's repr(float) (and so json.dumps) does.
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	mant, expStr, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expStr)
	if exp < -4 || exp >= 16 {
		return mant + "e" + expStr[:1] + fmt.Sprintf("%02d", abs(exp))
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// writeString writes s as a JSON string the way Python's json module does:
// only '"', '\\' and control characters escaped (and, with ensureASCII,
// every non-ASCII character as \uXXXX, in surrogate pairs above U+FFFF).
func writeString(b *strings.Builder, s string, ensureASCII bool) {
	const hex = "0123456789abcdef"
	u4 := func(r rune) {
		b.WriteString(`\u`)
		b.WriteByte(hex[r>>12&15])
		b.WriteByte(hex[r>>8&15])
		b.WriteByte(hex[r>>4&15])
		b.WriteByte(hex[r&15])
	}
	b.WriteByte('"')
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r < 0x20:
			u4(r)
		case ensureASCII && r > 0x7e:
			if r > 0xffff {
				r -= 0x10000
				u4(0xd800 + r>>10)
				u4(0xdc00 + r&0x3ff)
			} else {
				u4(r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
}
