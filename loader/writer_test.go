package loader

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
	"github.com/nlpodyssey/safetensors"
)

func TestWriteFileFormat(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.safetensors")
	tensors := []NamedTensor{
		{Name: "b", DType: runtime.BF16, Shape: []int{3}, Data: []byte{1, 2, 3, 4, 5, 6}},
		{Name: "a", DType: runtime.F32, Shape: []int{1, 1}, Data: []byte{7, 8, 9, 10}},
		{Name: "c", DType: runtime.U8, Shape: []int{1}, Data: []byte{11}},
	}
	if err := WriteFile(p, tensors, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(raw)
	if n%8 != 0 {
		t.Errorf("header length %d is not a multiple of 8", n)
	}
	header := raw[8 : 8+n]
	trimmed := bytes.TrimRight(header, " ")
	if len(header)-len(trimmed) >= 8 || trimmed[len(trimmed)-1] != '}' {
		t.Errorf("header %q is not JSON padded with fewer than 8 spaces", header)
	}
	// Layout: by decreasing element size, then the given order: a (F32), b (BF16), c (U8).
	var h map[string]struct {
		DType       string   `json:"dtype"`
		Shape       []int    `json:"shape"`
		DataOffsets [2]int64 `json:"data_offsets"`
	}
	var withMeta map[string]json.RawMessage
	if err := json.Unmarshal(header, &withMeta); err != nil {
		t.Fatal(err)
	}
	if string(withMeta["__metadata__"]) != `{"format":"pt"}` {
		t.Errorf("__metadata__ = %s", withMeta["__metadata__"])
	}
	delete(withMeta, "__metadata__")
	rest, _ := json.Marshal(withMeta)
	if err := json.Unmarshal(rest, &h); err != nil {
		t.Fatal(err)
	}
	if h["a"].DataOffsets != [2]int64{0, 4} || h["b"].DataOffsets != [2]int64{4, 10} || h["c"].DataOffsets != [2]int64{10, 11} {
		t.Errorf("offsets a %v b %v c %v, want [0 4] [4 10] [10 11]", h["a"].DataOffsets, h["b"].DataOffsets, h["c"].DataOffsets)
	}
	if h["b"].DType != "BF16" || fmt.Sprint(h["a"].Shape) != "[1 1]" {
		t.Errorf("header entries: %+v", h)
	}
	if got := raw[8+n:]; !bytes.Equal(got, []byte{7, 8, 9, 10, 1, 2, 3, 4, 5, 6, 11}) {
		t.Errorf("data section = %v", got)
	}
	// The library's own strict reader (contiguous data, exact length) accepts it.
	if _, _, err := safetensors.ReadMetadata(raw); err != nil {
		t.Errorf("safetensors.ReadMetadata rejects the file: %v", err)
	}
}

func TestWriteFileValidation(t *testing.T) {
	ok := NamedTensor{Name: "ok", DType: runtime.U8, Shape: []int{1}, Data: []byte{1}}
	tests := []struct {
		name    string
		tensors []NamedTensor
		want    []string
	}{
		{"duplicate", []NamedTensor{ok, ok}, []string{`tensor "ok" appears twice`}},
		{"empty name", []NamedTensor{{DType: runtime.U8, Shape: []int{0}}}, []string{"tensor 0 has an empty name"}},
		{"reserved name", []NamedTensor{{Name: "__metadata__", DType: runtime.U8}}, []string{"reserved"}},
		{"bad dtype", []NamedTensor{{Name: "x", Shape: []int{1}}}, []string{`tensor "x"`, "invalid dtype"}},
		{"negative dim", []NamedTensor{{Name: "x", DType: runtime.F32, Shape: []int{2, -1}}}, []string{`tensor "x"`, "negative dimension"}},
		{"data length", []NamedTensor{{Name: "x", DType: runtime.F32, Shape: []int{2}, Data: make([]byte, 7)}}, []string{`tensor "x"`, "needs 8 bytes, data has 7"}},
		{"overflow", []NamedTensor{{Name: "x", DType: runtime.F32, Shape: []int{1 << 40, 1 << 40}}}, []string{`tensor "x"`, "too large"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "x.safetensors")
			wantErr(t, WriteFile(p, tc.tensors, nil), append([]string{p}, tc.want...)...)
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("failed write left %d files", len(entries))
			}
			wantErr(t, WriteSharded(filepath.Join(dir, "s"), tc.tensors, 100), tc.want...)
		})
	}
	wantErr(t, WriteSharded(t.TempDir(), []NamedTensor{ok}, 0), "maxShardBytes must be positive")
	wantErr(t, WriteSharded(t.TempDir(), nil, 10), "no tensors")
}

func TestWriteFileFuncParallel(t *testing.T) {
	const count = 200
	specs := make([]TensorSpec, count)
	for i := range specs {
		specs[i] = TensorSpec{Name: fmt.Sprintf("t%03d", i), DType: runtime.F32, Shape: []int{i % 7, 3}}
	}
	fillByte := func(i int) byte { return byte(i*31 + 5) }
	var calls atomic.Int64
	p := filepath.Join(t.TempDir(), "x.safetensors")
	err := WriteFileFunc(p, specs, nil, func(i int, dst []byte) error {
		calls.Add(1)
		if len(dst) != 4*3*(i%7) {
			return fmt.Errorf("dst of %d bytes", len(dst))
		}
		for j := range dst {
			if dst[j] != 0 {
				return errors.New("dst not zeroed")
			}
			dst[j] = fillByte(i)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls.Load() != count {
		t.Errorf("fill called %d times, want %d", calls.Load(), count)
	}
	f, err := OpenFile(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i, s := range specs {
		b, err := f.Bytes(s.Name)
		if err != nil {
			t.Fatal(err)
		}
		if want := bytes.Repeat([]byte{fillByte(i)}, 4*3*(i%7)); !bytes.Equal(b, want) {
			t.Fatalf("%s: got %d bytes %v..., want %d of %d", s.Name, len(b), b[:min(len(b), 4)], len(want), fillByte(i))
		}
	}
}

func TestWriteFileFuncErrors(t *testing.T) {
	specs := make([]TensorSpec, 50)
	for i := range specs {
		specs[i] = TensorSpec{Name: fmt.Sprintf("t%d", i), DType: runtime.BF16, Shape: []int{8}}
	}
	for _, tc := range []struct {
		name string
		fill func(i int, dst []byte) error
		want string
	}{
		{"error", func(i int, dst []byte) error {
			if i == 17 {
				return errors.New("disk on fire")
			}
			return nil
		}, `tensor "t17": disk on fire`},
		{"panic", func(i int, dst []byte) error {
			if i == 23 {
				_ = dst[len(dst)+i] // out of range
			}
			return nil
		}, `tensor "t23": fill panicked`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "x.safetensors")
			wantErr(t, WriteFileFunc(p, specs, nil, tc.fill), p, tc.want)
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("failed write left %v", entries)
			}
		})
	}
	// A failed write does not replace an existing file.
	dir := t.TempDir()
	p := filepath.Join(dir, "x.safetensors")
	os.WriteFile(p, []byte("old"), 0o644)
	err := WriteFileFunc(p, specs, nil, func(int, []byte) error { return errors.New("no") })
	wantErr(t, err, "no")
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Errorf("existing file replaced by a failed write: %q", b)
	}
}

func TestWriteShardedFuncStreams(t *testing.T) {
	specs := []TensorSpec{
		{Name: "a", DType: runtime.BF16, Shape: []int{4}},
		{Name: "b", DType: runtime.BF16, Shape: []int{4}},
		{Name: "c", DType: runtime.BF16, Shape: []int{4}},
	}
	dir := t.TempDir()
	err := WriteShardedFunc(dir, specs, 16, func(i int, dst []byte) error {
		copy(dst, strings.Repeat(string(rune('a'+i)), len(dst)))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if len(c.Files()) != 2 {
		t.Errorf("got %d shards, want 2 (a+b = 16 bytes, then c)", len(c.Files()))
	}
	for i, s := range specs {
		b, _ := c.Bytes(s.Name)
		if want := strings.Repeat(string(rune('a'+i)), 8); string(b) != want {
			t.Errorf("%s = %q, want %q", s.Name, b, want)
		}
	}
}

// BenchmarkWriteFileFunc streams 256 MiB in 32 tensors of 8 MiB (the size of
// a 2048x2048 bf16 projection) through the parallel writer.
func BenchmarkWriteFileFunc(b *testing.B) {
	specs := make([]TensorSpec, 32)
	for i := range specs {
		specs[i] = TensorSpec{Name: fmt.Sprintf("w%d", i), DType: runtime.BF16, Shape: []int{2048, 2048}}
	}
	p := filepath.Join(b.TempDir(), "x.safetensors")
	b.SetBytes(32 << 23)
	for b.Loop() {
		err := WriteFileFunc(p, specs, nil, func(i int, dst []byte) error {
			dst[0] = byte(i) // the writer's own cost: allocation, zeroing, pwrite
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}
