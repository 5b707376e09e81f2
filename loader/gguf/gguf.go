// Package gguf reads GGUF files (the llama.cpp checkpoint format, versions 2
// and 3) and converts an unquantized Llama GGUF checkpoint into a Hugging
// Face checkpoint directory (config.json, model.safetensors,
// generation_config.json, tokenizer.json) that models.Load reads.
//
// A GGUF file is the magic "GGUF", a uint32 version, uint64 counts of
// tensors and of metadata entries, the metadata (key, uint32 value type,
// value), the tensor infos (name, uint32 dimension count, uint64 dimensions
// innermost first, uint32 ggml type, uint64 offset), then, aligned to
// general.alignment (32 by default), the tensor data; all little-endian.
// Only F32, F16 and BF16 tensors are converted: a quantized tensor is an
// error naming it.
package gguf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
)

// Value types of GGUF metadata.
const (
	typeU8 = iota
	typeI8
	typeU16
	typeI16
	typeU32
	typeI32
	typeF32
	typeBool
	typeString
	typeArray
	typeU64
	typeI64
	typeF64
)

// ggml tensor types this package converts.
const (
	ggmlF32  = 0
	ggmlF16  = 1
	ggmlBF16 = 30
)

// Tensor is one tensor's info in a GGUF file.
type Tensor struct {
	Name string
	// Dims are the dimensions innermost (contiguous) first, as GGUF stores
	// them: a PyTorch [out, in] weight has Dims [in, out].
	Dims []uint64
	// Type is the ggml type number (0 F32, 1 F16, 30 BF16, others
	// quantized).
	Type uint32
	// Offset is the data's offset from the start of the data section.
	Offset uint64
}

// Elements is the product of Dims.
func (t Tensor) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// File is a GGUF file read into memory.
type File struct {
	Version  uint32
	Metadata map[string]any // uint8 … float64, bool, string, or []any for arrays
	Tensors  []Tensor
	data     []byte // the data section
}

// ErrFormat is wrapped by every error about a malformed file.
var ErrFormat = errors.New("gguf: malformed file")

// maxArray bounds a metadata array's element count (a vocabulary of 16 M
// tokens is far past any model's).
const maxArray = 1 << 24

// Open reads the GGUF file at path. It reads the whole file into memory and
// the File keeps it, so the peak is about the file's size plus what is
// decoded from it (ConvertLlama adds the converted tensors).
func Open(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// reader decodes little-endian values from a byte slice, remembering the
// first error.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) take(n uint64, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)-r.off) {
		r.err = fmt.Errorf("%w: %s at byte %d needs %d bytes, %d left", ErrFormat, what, r.off, n, len(r.b)-r.off)
		return nil
	}
	s := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return s
}

func (r *reader) u32(what string) uint32 {
	if s := r.take(4, what); s != nil {
		return binary.LittleEndian.Uint32(s)
	}
	return 0
}

func (r *reader) u64(what string) uint64 {
	if s := r.take(8, what); s != nil {
		return binary.LittleEndian.Uint64(s)
	}
	return 0
}

func (r *reader) str(what string) string {
	n := r.u64(what + " length")
	return string(r.take(n, what))
}

// value reads one metadata value of type t (arrays nest up to depth 2).
func (r *reader) value(t uint32, key string, depth int) any {
	switch t {
	case typeU8, typeI8, typeBool:
		s := r.take(1, key)
		if s == nil {
			return nil
		}
		switch t {
		case typeU8:
			return s[0]
		case typeI8:
			return int8(s[0])
		}
		return s[0] != 0
	case typeU16, typeI16:
		s := r.take(2, key)
		if s == nil {
			return nil
		}
		v := binary.LittleEndian.Uint16(s)
		if t == typeI16 {
			return int16(v)
		}
		return v
	case typeU32:
		return r.u32(key)
	case typeI32:
		return int32(r.u32(key))
	case typeF32:
		return math.Float32frombits(r.u32(key))
	case typeU64:
		return r.u64(key)
	case typeI64:
		return int64(r.u64(key))
	case typeF64:
		return math.Float64frombits(r.u64(key))
	case typeString:
		return r.str(key)
	case typeArray:
		if depth > 2 {
			r.err = fmt.Errorf("%w: metadata %q: arrays nested too deep", ErrFormat, key)
			return nil
		}
		et := r.u32(key + " element type")
		n := r.u64(key + " length")
		if r.err == nil && n > uint64(len(r.b)-r.off) {
			r.err = fmt.Errorf("%w: metadata %q: array of %d elements in %d bytes", ErrFormat, key, n, len(r.b)-r.off)
			return nil
		}
		if r.err == nil && n > maxArray {
			r.err = fmt.Errorf("%w: metadata %q: array of %d elements (at most %d are read)", ErrFormat, key, n, maxArray)
			return nil
		}
		// Preallocate little: append grows, and n is only bounded by the
		// bytes left, which include the tensor data.
		out := make([]any, 0, min(n, 1<<12))
		for i := uint64(0); i < n && r.err == nil; i++ {
			out = append(out, r.value(et, key, depth+1))
		}
		return out
	}
	if r.err == nil {
		r.err = fmt.Errorf("%w: metadata %q has unknown value type %d", ErrFormat, key, t)
	}
	return nil
}

// Parse decodes a GGUF file held in b (which the File keeps).
func Parse(b []byte) (*File, error) {
	r := &reader{b: b}
	if magic := r.take(4, "magic"); r.err != nil || string(magic) != "GGUF" {
		return nil, fmt.Errorf("%w: no GGUF magic", ErrFormat)
	}
	f := &File{Version: r.u32("version"), Metadata: map[string]any{}}
	if r.err == nil && f.Version != 2 && f.Version != 3 {
		return nil, fmt.Errorf("%w: version %d (versions 2 and 3 are read)", ErrFormat, f.Version)
	}
	nt, nkv := r.u64("tensor count"), r.u64("metadata count")
	if r.err == nil && (nt > uint64(len(b)) || nkv > uint64(len(b))) {
		return nil, fmt.Errorf("%w: %d tensors and %d metadata entries in a %d-byte file", ErrFormat, nt, nkv, len(b))
	}
	for i := uint64(0); i < nkv && r.err == nil; i++ {
		k := r.str("metadata key")
		t := r.u32("metadata type")
		f.Metadata[k] = r.value(t, k, 0)
	}
	for i := uint64(0); i < nt && r.err == nil; i++ {
		t := Tensor{Name: r.str("tensor name")}
		nd := r.u32(t.Name + " dimension count")
		if nd > 8 {
			return nil, fmt.Errorf("%w: tensor %q has %d dimensions", ErrFormat, t.Name, nd)
		}
		for range nd {
			t.Dims = append(t.Dims, r.u64(t.Name+" dimension"))
		}
		n := uint64(1)
		for _, d := range t.Dims {
			if d != 0 && n > math.MaxUint64/8/d {
				return nil, fmt.Errorf("%w: tensor %q has dimensions %v: too many elements", ErrFormat, t.Name, t.Dims)
			}
			n *= d
		}
		t.Type = r.u32(t.Name + " type")
		t.Offset = r.u64(t.Name + " offset")
		f.Tensors = append(f.Tensors, t)
	}
	if r.err != nil {
		return nil, r.err
	}
	align := uint64(32)
	if a, ok := f.Metadata["general.alignment"]; ok {
		v, ok := asInt(a)
		if !ok || v <= 0 || v&(v-1) != 0 {
			return nil, fmt.Errorf("%w: general.alignment %v is not a power of two", ErrFormat, a)
		}
		align = uint64(v)
	}
	start := (uint64(r.off) + align - 1) / align * align
	if start > uint64(len(b)) {
		return nil, fmt.Errorf("%w: data section starts past the end", ErrFormat)
	}
	f.data = b[start:]
	for _, t := range f.Tensors {
		size, ok := elemSize(t.Type)
		if !ok {
			continue // checked when read
		}
		if n := t.Elements() * size; t.Offset > uint64(len(f.data)) || n > uint64(len(f.data))-t.Offset {
			return nil, fmt.Errorf("%w: tensor %q (%d bytes at %d) runs past the end of the data (%d bytes)", ErrFormat, t.Name, n, t.Offset, len(f.data))
		}
	}
	return f, nil
}

func elemSize(t uint32) (uint64, bool) {
	switch t {
	case ggmlF32:
		return 4, true
	case ggmlF16, ggmlBF16:
		return 2, true
	}
	return 0, false
}

// Tensor returns the info of the tensor named name.
func (f *File) Tensor(name string) (Tensor, bool) {
	for _, t := range f.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return Tensor{}, false
}

// Float32 returns the tensor named name widened to float32, in GGUF order
// (innermost dimension contiguous).
func (f *File) Float32(name string) ([]float32, Tensor, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return nil, t, fmt.Errorf("gguf: no tensor %q", name)
	}
	size, ok := elemSize(t.Type)
	if !ok {
		return nil, t, fmt.Errorf("gguf: tensor %q has ggml type %d: only F32 (0), F16 (1) and BF16 (30) are converted, not quantized types", name, t.Type)
	}
	raw := f.data[t.Offset : t.Offset+t.Elements()*size]
	out := make([]float32, t.Elements())
	for i := range out {
		switch t.Type {
		case ggmlF32:
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		case ggmlF16:
			out[i] = halfToFloat(binary.LittleEndian.Uint16(raw[2*i:]))
		default:
			out[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(raw[2*i:])) << 16)
		}
	}
	return out, t, nil
}

// halfToFloat widens an IEEE binary16 value.
func halfToFloat(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // Inf, NaN
		return math.Float32frombits(sign | 0xff<<23 | man<<13)
	case exp == 0 && man == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: value man·2^-24
		v := float32(man) / (1 << 24)
		if sign != 0 {
			v = -v
		}
		return v
	}
	return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
}

// asInt reads an integer metadata value of any width.
func asInt(v any) (int64, bool) {
	switch x := v.(type) {
	case uint8:
		return int64(x), true
	case int8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case int16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case int32:
		return int64(x), true
	case uint64:
		if x > math.MaxInt64 {
			return 0, false
		}
		return int64(x), true
	case int64:
		return x, true
	}
	return 0, false
}

// asFloat reads a float (or integer) metadata value.
func asFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case float32:
		return float64(x), true
	case float64:
		return x, true
	}
	i, ok := asInt(v)
	return float64(i), ok
}

// Int returns the integer metadata value key.
func (f *File) Int(key string) (int64, error) {
	v, ok := f.Metadata[key]
	if !ok {
		return 0, fmt.Errorf("gguf: no metadata %q", key)
	}
	i, ok := asInt(v)
	if !ok {
		return 0, fmt.Errorf("gguf: metadata %q is %T, want an integer", key, v)
	}
	return i, nil
}

// String returns the string metadata value key.
func (f *File) String(key string) (string, error) {
	v, ok := f.Metadata[key]
	if !ok {
		return "", fmt.Errorf("gguf: no metadata %q", key)
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("gguf: metadata %q is %T, want a string", key, v)
	}
	return s, nil
}

// Strings returns the string-array metadata value key.
func (f *File) Strings(key string) ([]string, error) {
	v, ok := f.Metadata[key].([]any)
	if !ok {
		return nil, fmt.Errorf("gguf: no string array %q", key)
	}
	out := make([]string, len(v))
	for i, x := range v {
		s, ok := x.(string)
		if !ok {
			return nil, fmt.Errorf("gguf: %q[%d] is %T, want a string", key, i, x)
		}
		out[i] = s
	}
	return out, nil
}

// Floats returns the numeric-array metadata value key as float64.
func (f *File) Floats(key string) ([]float64, error) {
	v, ok := f.Metadata[key].([]any)
	if !ok {
		return nil, fmt.Errorf("gguf: no array %q", key)
	}
	out := make([]float64, len(v))
	for i, x := range v {
		n, ok := asFloat(x)
		if !ok {
			return nil, fmt.Errorf("gguf: %q[%d] is %T, want a number", key, i, x)
		}
		out[i] = n
	}
	return out, nil
}
