// Package loader reads and writes model checkpoints: safetensors files
// (memory-mapped, single or sharded with model.safetensors.index.json) and
// Hugging Face config.json files for Llama models.
//
// Every byte of a file is validated before it is trusted: a malformed header,
// a truncated file or an unsupported dtype is an error that names the file
// and, where there is one, the tensor; never a panic.
package loader

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"

	"github.com/flextensor-go/flextensor/runtime"
	"github.com/nlpodyssey/safetensors"
	"golang.org/x/sys/unix"
)

// maxHeaderBytes bounds the JSON header of a safetensors file, as the
// reference implementation does (100 MB), so that a hostile length cannot make
// the parser allocate without limit.
const maxHeaderBytes = 100_000_000

// TensorInfo describes one tensor stored in a safetensors file: its element
// type, its shape (row-major, outermost dimension first; empty for a scalar)
// and where its bytes lie.
type TensorInfo struct {
	Name   string        // the checkpoint name, e.g. "model.layers.0.mlp.up_proj.weight"
	DType  runtime.DType // element type
	Shape  []int         // dimensions; the product times DType.Size() is Size
	File   string        // path of the file holding the bytes
	Offset int64         // absolute byte offset of the first byte in File
	Size   int64         // number of bytes
}

// NumElements is the product of the shape's dimensions (1 for a scalar).
func (t TensorInfo) NumElements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= int64(d)
	}
	return n
}

// File is one safetensors file, opened read-only and memory-mapped. Opening
// reads and validates only the header; a tensor's pages are touched when its
// bytes are read. A File's methods may be called from several goroutines at
// once, except Close.
type File struct {
	path    string
	f       *os.File
	data    []byte // the whole file, mapped read-only; nil once closed
	tensors map[string]TensorInfo
	names   []string // sorted
	meta    map[string]string
}

// OpenFile maps the safetensors file at path and validates its header: the
// header length must lie within the file, the header must be JSON in the
// safetensors layout, every dtype must be one the runtime knows, every shape
// must match its byte range, and the tensors must tile the data section
// exactly (no gap, overlap, truncation or trailing bytes).
func OpenFile(path string) (*File, error) {
	f, err := OpenRegular(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	sf, err := openFile(path, f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return sf, nil
}

func openFile(path string, f *os.File) (*File, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("safetensors %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("safetensors %s: not a regular file", path)
	}
	size := st.Size()
	if size < 8 {
		return nil, fmt.Errorf("safetensors %s: file is %d bytes, shorter than the 8-byte header length", path, size)
	}
	if size > math.MaxInt {
		return nil, fmt.Errorf("safetensors %s: file of %d bytes is too large to map", path, size)
	}
	var lenBuf [8]byte
	if _, err := f.ReadAt(lenBuf[:], 0); err != nil {
		return nil, fmt.Errorf("safetensors %s: reading header length: %w", path, err)
	}
	hlen := binary.LittleEndian.Uint64(lenBuf[:])
	if hlen > uint64(size-8) {
		return nil, fmt.Errorf("safetensors %s: header length %d runs past the end of the file (%d bytes after the length field): truncated or not a safetensors file",
			path, hlen, size-8)
	}
	if hlen > maxHeaderBytes {
		return nil, fmt.Errorf("safetensors %s: header length %d exceeds the limit of %d bytes", path, hlen, maxHeaderBytes)
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("safetensors %s: mmap: %w", path, err)
	}
	sf := &File{path: path, f: f, data: data}
	if err := sf.parseHeader(data[8:8+hlen], 8+int64(hlen), size); err != nil {
		unix.Munmap(data)
		return nil, err
	}
	registerMapped(sf)
	return sf, nil
}

// decodeMetadata hands the header to the safetensors library, converting a
// panic inside it into an error.
func decodeMetadata(header []byte) (md safetensors.Metadata, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("header parser panicked: %v", r)
		}
	}()
	err = json.Unmarshal(header, &md)
	return md, err
}

// parseHeader decodes and validates the JSON header; dataStart is the file
// offset of the data section and size the file's length.
func (sf *File) parseHeader(header []byte, dataStart, size int64) error {
	if err := checkHeaderObject(header); err != nil {
		return fmt.Errorf("safetensors %s: %w", sf.path, err)
	}
	header, fp8 := rewriteFP8DTypes(header)
	md, err := decodeMetadata(header)
	if err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			return fmt.Errorf("safetensors %s: header is not valid JSON at byte %d of the file: %w", sf.path, 8+max(syn.Offset-1, 0), err)
		}
		return fmt.Errorf("safetensors %s: bad header: %w", sf.path, err)
	}
	type entry struct {
		name   string
		info   *safetensors.TensorInfo
		dtype  runtime.DType
		nbytes uint64
	}
	infos := md.Tensors()
	entries := make([]entry, 0, len(infos))
	for name, info := range infos {
		dt, err := runtime.ParseDType(info.DType.String())
		if err != nil {
			return fmt.Errorf("safetensors %s: tensor %q: unsupported dtype %s (supported: F32, F16, BF16, I32, I64, U8, F8_E4M3, F8_E5M2)", sf.path, name, info.DType)
		}
		if real, ok := fp8[name]; ok {
			dt = real // read as U8 by the library (rewriteFP8DTypes)
		}
		nbytes, ok := shapeBytes(info.Shape, uint64(dt.Size()))
		if !ok {
			return fmt.Errorf("safetensors %s: tensor %q: shape %v of %s is too large", sf.path, name, info.Shape, dt)
		}
		entries = append(entries, entry{name, info, dt, nbytes})
	}
	sort.Slice(entries, func(i, j int) bool {
		a, b := entries[i].info.DataOffsets, entries[j].info.DataOffsets
		if a != b {
			return a[0] < b[0] || (a[0] == b[0] && a[1] < b[1])
		}
		return entries[i].name < entries[j].name
	})

	dataLen := uint64(size - dataStart)
	sf.tensors = make(map[string]TensorInfo, len(entries))
	sf.names = make([]string, 0, len(entries))
	var end uint64
	prev := ""
	for _, e := range entries {
		s, t := e.info.DataOffsets[0], e.info.DataOffsets[1]
		switch {
		case t < s:
			return fmt.Errorf("safetensors %s: tensor %q: data_offsets [%d, %d] end before they begin", sf.path, e.name, s, t)
		case t-s != e.nbytes:
			return fmt.Errorf("safetensors %s: tensor %q: shape %v of %s needs %d bytes but data_offsets [%d, %d] span %d",
				sf.path, e.name, e.info.Shape, e.dtype, e.nbytes, s, t, t-s)
		case t > dataLen:
			return fmt.Errorf("safetensors %s: tensor %q: data_offsets [%d, %d] run past the end of the data section (%d bytes): file truncated?",
				sf.path, e.name, s, t, dataLen)
		case s < end:
			return fmt.Errorf("safetensors %s: tensor %q: data_offsets [%d, %d] overlap tensor %q, which ends at %d", sf.path, e.name, s, t, prev, end)
		case s > end:
			return fmt.Errorf("safetensors %s: tensor %q: data_offsets [%d, %d] leave a gap of %d bytes after the previous tensor", sf.path, e.name, s, t, s-end)
		}
		end, prev = t, e.name
		shape := make([]int, len(e.info.Shape))
		for i, d := range e.info.Shape {
			shape[i] = int(d) // fits: shapeBytes bounded the product
		}
		sf.tensors[e.name] = TensorInfo{
			Name: e.name, DType: e.dtype, Shape: shape, File: sf.path,
			Offset: dataStart + int64(s), Size: int64(e.nbytes),
		}
		sf.names = append(sf.names, e.name)
	}
	if end != dataLen {
		return fmt.Errorf("safetensors %s: %d trailing bytes after the last tensor (data section is %d bytes, tensors cover %d)",
			sf.path, dataLen-end, dataLen, end)
	}
	slices.Sort(sf.names)
	sf.meta = md.Metadata()
	return nil
}

// checkHeaderObject checks that the header is one JSON object whose keys
// (tensor names and __metadata__) are distinct: encoding/json would keep the
// last of two equal keys without a word, so that a duplicated tensor name
// silently replaces the first.
func checkHeaderObject(header []byte) error {
	dec := json.NewDecoder(bytes.NewReader(header))
	tok, err := dec.Token()
	if err != nil {
		return nil // the parser reports the syntax error with its offset
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		what := "a " + fmt.Sprintf("%T", tok)
		switch tok.(type) {
		case nil:
			what = "null"
		case json.Delim:
			what = "an array"
		case float64:
			what = "a number"
		}
		return fmt.Errorf("header is %s, not a JSON object of tensors", what)
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		key, _ := tok.(string)
		if seen[key] {
			return fmt.Errorf("header names tensor %q twice (a JSON reader keeps only the last)", key)
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil
		}
	}
	return nil
}

// shapeBytes is the product of shape and elemSize, and false if it, or any
// dimension, does not fit in an int64.
func shapeBytes(shape []uint64, elemSize uint64) (uint64, bool) {
	n := elemSize
	for _, d := range shape {
		if d > math.MaxInt64 {
			return 0, false
		}
		if d == 0 {
			n = 0
			continue
		}
		if n > math.MaxInt64/d {
			return 0, false
		}
		n *= d
	}
	return n, true
}

// Path is the path the file was opened with.
func (sf *File) Path() string { return sf.path }

// Names lists the file's tensor names in sorted order.
func (sf *File) Names() []string { return slices.Clone(sf.names) }

// Metadata is the header's optional "__metadata__" map (nil when absent).
func (sf *File) Metadata() map[string]string { return sf.meta }

// Info describes the tensor called name; an unknown name is an error naming
// it and the file.
func (sf *File) Info(name string) (TensorInfo, error) {
	t, ok := sf.tensors[name]
	if !ok {
		return TensorInfo{}, fmt.Errorf("safetensors %s: no tensor %q", sf.path, name)
	}
	t.Shape = slices.Clone(t.Shape)
	return t, nil
}

// Bytes returns the tensor's bytes as a view into the read-only mapping: no
// copy is made, and only the pages read are loaded. The slice must not be
// written to (the mapping is read-only: a write faults) and must not be used
// after Close.
func (sf *File) Bytes(name string) ([]byte, error) {
	t, err := sf.Info(name)
	if err != nil {
		return nil, err
	}
	if sf.data == nil {
		return nil, fmt.Errorf("safetensors %s: tensor %q: file is closed", sf.path, name)
	}
	end := t.Offset + t.Size
	return sf.data[t.Offset:end:end], nil
}

// ReadInto copies the tensor's bytes into dst, whose length must equal the
// tensor's Size. It reads through the file descriptor (pread) rather than the
// mapping, so the bytes it moves are ordinary, countable reads.
func (sf *File) ReadInto(name string, dst []byte) error {
	t, err := sf.Info(name)
	if err != nil {
		return err
	}
	if int64(len(dst)) != t.Size {
		return fmt.Errorf("safetensors %s: tensor %q is %d bytes, destination is %d", sf.path, name, t.Size, len(dst))
	}
	if _, err := sf.f.ReadAt(dst, t.Offset); err != nil {
		return fmt.Errorf("safetensors %s: reading tensor %q: %w", sf.path, name, err)
	}
	return nil
}

// Close unmaps and closes the file. Slices returned by Bytes become invalid.
// Closing twice is harmless.
func (sf *File) Close() error {
	if sf.data == nil {
		return nil
	}
	unregisterMapped(sf)
	err := unix.Munmap(sf.data)
	sf.data = nil
	if cerr := sf.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("safetensors %s: close: %w", sf.path, err)
	}
	return nil
}
