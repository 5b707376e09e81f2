package loader

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
)

// ConfigFileName is the name of a Hugging Face model configuration file.
const ConfigFileName = "config.json"

// ReadConfigFile reads dir/config.json and returns its bytes and path (for
// errors). What the fields mean is the model family's business
// (models/...); this package only reads them (ParseFields).
func ReadConfigFile(dir string) ([]byte, string, error) {
	path := filepath.Join(dir, ConfigFileName)
	data, err := ReadRegularFile(path)
	if err != nil {
		return nil, path, fmt.Errorf("model config: %w", err)
	}
	return data, path, nil
}

// ParseFields parses data as one JSON object whose fields are then read by
// the typed getters of Fields; source names the file in errors. A JSON
// error names its line and column.
func ParseFields(data []byte, source string) (*Fields, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("config %s: %w", source, describeJSONError(data, err))
	}
	if top == nil {
		return nil, fmt.Errorf("config %s: want a JSON object, got null", source)
	}
	return &Fields{src: source, m: top}, nil
}

// Fields decodes fields of one JSON object, keeping the first error (which
// names the source and the field's dotted path): read every field, then
// check Err. A getter returns its default when the field is absent or null
// (or malformed, after recording the error).
type Fields struct {
	src    string
	prefix string // "" at top level, "rope_scaling." inside
	m      map[string]json.RawMessage
	err    error
}

// Fail records err unless an error is already recorded.
func (r *Fields) Fail(err error) {
	if r.err == nil && err != nil {
		r.err = err
	}
}

// Errorf is an error naming the source and the field key.
func (r *Fields) Errorf(key, format string, args ...any) error {
	return fmt.Errorf("config %s: field %s: %s", r.src, r.prefix+key, fmt.Sprintf(format, args...))
}

// raw is the field's JSON text, or nil when it is absent or null.
func (r *Fields) raw(key string) []byte {
	v := bytes.TrimSpace(r.m[key])
	if len(v) == 0 || string(v) == "null" {
		return nil
	}
	return v
}

// Present reports whether the field is there and not null.
func (r *Fields) Present(key string) bool { return r.raw(key) != nil }

// number parses a JSON number field.
func (r *Fields) number(key string, v []byte) (float64, bool) {
	if v[0] != '-' && (v[0] < '0' || v[0] > '9') {
		r.Fail(r.Errorf(key, "want a number, got %s", clip(v)))
		return 0, false
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil {
		r.Fail(r.Errorf(key, "number %s out of range", clip(v)))
		return 0, false
	}
	return f, true
}

// Int reads an integer field (a whole-valued number of at most 32 bits);
// def when absent.
func (r *Fields) Int(key string, def int) int {
	v := r.raw(key)
	if v == nil {
		return def
	}
	n, ok := r.intValue(key, v)
	if !ok {
		return def
	}
	return n
}

// intValue parses a JSON integer (a whole-valued number such as 8.0 is
// accepted) of at most 32 bits, so that products of two sizes fit an int64.
func (r *Fields) intValue(key string, v []byte) (int, bool) {
	f, ok := r.number(key, v)
	if !ok {
		return 0, false
	}
	if f != math.Trunc(f) || f < math.MinInt32 || f > math.MaxInt32 {
		r.Fail(r.Errorf(key, "want an integer of at most 32 bits, got %s", clip(v)))
		return 0, false
	}
	return int(f), true
}

// Positive reads an integer that must be > 0; def == 0 makes it required.
func (r *Fields) Positive(key string, def int) int {
	if def == 0 && !r.Present(key) {
		r.Fail(r.Errorf(key, "missing"))
		return 0
	}
	n := r.Int(key, def)
	if n <= 0 {
		r.Fail(r.Errorf(key, "must be positive, got %d", n))
	}
	return n
}

// Float reads a number field; def when absent.
func (r *Fields) Float(key string, def float64) float64 {
	v := r.raw(key)
	if v == nil {
		return def
	}
	f, ok := r.number(key, v)
	if !ok {
		return def
	}
	return f
}

// Str reads a string field; def when absent.
func (r *Fields) Str(key, def string) string {
	v := r.raw(key)
	if v == nil {
		return def
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		r.Fail(r.Errorf(key, "want a string, got %s", clip(v)))
		return def
	}
	return s
}

// Bool reads a true/false field; def when absent.
func (r *Fields) Bool(key string, def bool) bool {
	switch v := r.raw(key); string(v) {
	case "":
		return def
	case "true":
		return true
	case "false":
		return false
	default:
		r.Fail(r.Errorf(key, "want true or false, got %s", clip(v)))
		return def
	}
}

// Strings reads a list of strings; nil when absent.
func (r *Fields) Strings(key string) []string {
	v := r.raw(key)
	if v == nil {
		return nil
	}
	var s []string
	if err := json.Unmarshal(v, &s); err != nil {
		r.Fail(r.Errorf(key, "want a list of strings, got %s", clip(v)))
		return nil
	}
	return s
}

// Ints reads an integer or a list of integers; nil when absent.
func (r *Fields) Ints(key string) []int {
	v := r.raw(key)
	if v == nil {
		return nil
	}
	if v[0] != '[' {
		if n, ok := r.intValue(key, v); ok {
			return []int{n}
		}
		return nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(v, &items); err != nil {
		r.Fail(r.Errorf(key, "want an integer or a list of integers, got %s", clip(v)))
		return nil
	}
	out := make([]int, len(items))
	for i, it := range items {
		n, ok := r.intValue(fmt.Sprintf("%s[%d]", key, i), bytes.TrimSpace(it))
		if !ok {
			return nil
		}
		out[i] = n
	}
	return out
}

// Floats reads a list of numbers; nil when absent.
func (r *Fields) Floats(key string) []float64 {
	v := r.raw(key)
	if v == nil {
		return nil
	}
	var items []json.RawMessage
	if v[0] != '[' || json.Unmarshal(v, &items) != nil {
		r.Fail(r.Errorf(key, "want a list of numbers, got %s", clip(v)))
		return nil
	}
	out := make([]float64, len(items))
	for i, it := range items {
		it = bytes.TrimSpace(it)
		if len(it) == 0 {
			return nil
		}
		n, ok := r.number(fmt.Sprintf("%s[%d]", key, i), it)
		if !ok {
			return nil
		}
		out[i] = n
	}
	return out
}

// Object returns a reader over an object field, or nil when the field is
// absent, null, or not an object (the last is recorded as an error).
func (r *Fields) Object(key string) *Fields {
	v := r.raw(key)
	if v == nil {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(v, &m); err != nil {
		r.Fail(r.Errorf(key, "want an object, got %s", clip(v)))
		return nil
	}
	return &Fields{src: r.src, prefix: r.prefix + key + ".", m: m}
}

// clip shortens a JSON value for an error message.
func clip(v []byte) string {
	if len(v) > 60 {
		return string(v[:57]) + "..."
	}
	return string(v)
}

// describeJSONError adds the line and column of a syntax or type error.
func describeJSONError(data []byte, err error) error {
	var off int64 = -1
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		off = syn.Offset - 1 // Offset counts the offending byte
		if off < 0 {
			off = 0
		}
	case errors.As(err, &typ):
		off = typ.Offset
	}
	if off < 0 || off > int64(len(data)) {
		return fmt.Errorf("invalid JSON: %w", err)
	}
	line, col := 1, 1
	for _, b := range data[:off] {
		if b == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return fmt.Errorf("invalid JSON at line %d, column %d (byte %d): %w", line, col, off, err)
}

// Err is the first error recorded, nil if none.
func (r *Fields) Err() error { return r.err }
