package loader

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/internal/testfile"
	"github.com/flextensor-go/flextensor/runtime"
)

const tinyLlama = "../testdata/tiny-llama"

// rawSafetensors builds file bytes from a literal header and data section.
func rawSafetensors(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

func writeTemp(t *testing.T, name string, content []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, content, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// wantErr fails unless err is non-nil and its text holds every part.
var wantErr = testfile.WantErr

func TestOpenFileTinyLlama(t *testing.T) {
	f, err := OpenFile(filepath.Join(tinyLlama, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names := f.Names()
	if len(names) != 39 || !slices.IsSorted(names) {
		t.Fatalf("got %d names (sorted: %v), want 39 sorted", len(names), slices.IsSorted(names))
	}
	if got := f.Metadata()["format"]; got != "pt" {
		t.Errorf("metadata format = %q, want pt", got)
	}
	info, err := f.Info("model.layers.0.mlp.down_proj.weight")
	if err != nil {
		t.Fatal(err)
	}
	// From the header: data_offsets [262400, 352512], header length 4128.
	want := TensorInfo{Name: "model.layers.0.mlp.down_proj.weight", DType: runtime.BF16, Shape: []int{128, 352},
		File: filepath.Join(tinyLlama, "model.safetensors"), Offset: 8 + 4128 + 262400, Size: 352512 - 262400}
	if info.Name != want.Name || info.DType != want.DType || !slices.Equal(info.Shape, want.Shape) ||
		info.File != want.File || info.Offset != want.Offset || info.Size != want.Size {
		t.Errorf("Info = %+v, want %+v", info, want)
	}
	if info.NumElements()*2 != info.Size {
		t.Errorf("NumElements %d inconsistent with Size %d", info.NumElements(), info.Size)
	}
	// The mapped view and a pread of the same tensor agree, and both match the
	// file's bytes at the stated offset.
	view, err := f.Bytes(info.Name)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, info.Size)
	if err := f.ReadInto(info.Name, got); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(info.File)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(view, got) || !bytes.Equal(got, raw[info.Offset:info.Offset+info.Size]) {
		t.Error("Bytes, ReadInto and the file's bytes disagree")
	}
	if cap(view) != len(view) {
		t.Errorf("view capacity %d exceeds its length %d: appends would clobber the next tensor", cap(view), len(view))
	}
	wantErr(t, f.ReadInto(info.Name, make([]byte, 3)), "model.layers.0.mlp.down_proj.weight", "destination is 3")
	_, err = f.Info("nope")
	wantErr(t, err, `"nope"`, "model.safetensors")

	// Info hands out a copy of the shape.
	info.Shape[0] = -1
	if again, _ := f.Info(info.Name); again.Shape[0] != 128 {
		t.Error("mutating Info's shape changed the file's record")
	}

	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	_, err = f.Bytes(info.Name)
	wantErr(t, err, "closed", info.Name)
}

func TestOpenFileErrors(t *testing.T) {
	good := `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`
	tests := []struct {
		name    string
		content []byte
		want    []string
	}{
		{"empty", nil, []string{"0 bytes", "shorter than the 8-byte header length"}},
		{"short", []byte{1, 2, 3}, []string{"3 bytes", "shorter than the 8-byte"}},
		{"header length past EOF", rawSafetensors(good, make([]byte, 8))[:20],
			[]string{"header length 54", "past the end of the file (12 bytes"}},
		{"huge header length", binary.LittleEndian.AppendUint64(nil, 1<<62), []string{"header length 4611686018427387904", "past the end"}},
		{"header not JSON", rawSafetensors(`{"a": nope}`, nil), []string{"not valid JSON at byte 15", "invalid character"}},
		{"header not an object", rawSafetensors(`[1,2,3] `, nil), []string{"header is an array, not a JSON object of tensors"}},
		{"tensor entry missing keys", rawSafetensors(`{"a":{"dtype":"F32"}}`, nil), []string{`tensor "a"`, "expected 3 keys"}},
		{"unknown dtype", rawSafetensors(`{"w":{"dtype":"F8_E8M0","shape":[2],"data_offsets":[0,2]}}`, make([]byte, 2)),
			[]string{`tensor "w"`, `"F8_E8M0"`}},
		{"fp8 shape does not match range", rawSafetensors(`{"w":{"dtype":"F8_E4M3","shape":[3],"data_offsets":[0,2]}}`, make([]byte, 2)),
			[]string{`tensor "w"`, "shape [3] of F8_E4M3 needs 3 bytes", "span 2"}},
		{"fp8 truncated", rawSafetensors(`{"w":{"dtype":"F8_E5M2","shape":[4],"data_offsets":[0,4]}}`, make([]byte, 2)),
			[]string{`tensor "w"`, "past the end of the data section"}},
		{"fp8 beside a bad entry", rawSafetensors(`{"w":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"F32"}}`, make([]byte, 2)),
			[]string{`tensor "b"`, "expected 3 keys"}},
		{"unsupported dtype", rawSafetensors(`{"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}}`, make([]byte, 8)),
			[]string{`tensor "w"`, "unsupported dtype F64"}},
		{"truncated", rawSafetensors(good, make([]byte, 5)),
			[]string{`tensor "a"`, "data_offsets [0, 8]", "past the end of the data section (5 bytes)", "truncated"}},
		{"shape does not match range", rawSafetensors(`{"a":{"dtype":"BF16","shape":[3],"data_offsets":[0,8]}}`, make([]byte, 8)),
			[]string{`tensor "a"`, "shape [3] of BF16 needs 6 bytes", "span 8"}},
		{"offsets reversed", rawSafetensors(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}}`, make([]byte, 4)),
			[]string{`tensor "a"`, "end before they begin"}},
		{"shape overflow", rawSafetensors(`{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`, nil),
			[]string{`tensor "a"`, "too large"}},
		{"negative dim", rawSafetensors(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}}`, nil),
			[]string{`tensor "a"`, "shape"}},
		{"gap", rawSafetensors(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}}`, make([]byte, 6)),
			[]string{`tensor "b"`, "gap of 2 bytes"}},
		{"overlap", rawSafetensors(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}`, make([]byte, 4)),
			[]string{`tensor "b"`, `overlap tensor "a"`}},
		{"trailing bytes", rawSafetensors(good, make([]byte, 12)), []string{"4 trailing bytes"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := writeTemp(t, "bad.safetensors", tc.content)
			f, err := OpenFile(p)
			if err == nil {
				f.Close()
			}
			wantErr(t, err, append([]string{p}, tc.want...)...)
		})
	}
}

func TestOpenFileMissingAndDirectory(t *testing.T) {
	p := filepath.Join(t.TempDir(), "absent.safetensors")
	_, err := OpenFile(p)
	wantErr(t, err, p, "no such file")
	_, err = OpenFile(t.TempDir())
	wantErr(t, err, "not a regular file")
}

func TestOpenFileEmptyAndScalarTensors(t *testing.T) {
	// A scalar (shape []) and an empty tensor (shape [0]) are legal.
	p := writeTemp(t, "x.safetensors", rawSafetensors(
		`{"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]},"e":{"dtype":"BF16","shape":[0,7],"data_offsets":[4,4]}}`,
		[]byte{1, 2, 3, 4}))
	f, err := OpenFile(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, err := f.Bytes("s")
	if err != nil || !bytes.Equal(s, []byte{1, 2, 3, 4}) {
		t.Errorf("scalar bytes = %v, %v", s, err)
	}
	e, err := f.Bytes("e")
	if err != nil || len(e) != 0 {
		t.Errorf("empty tensor bytes = %v, %v", e, err)
	}
	if err := f.ReadInto("e", nil); err != nil {
		t.Errorf("ReadInto of an empty tensor: %v", err)
	}
	if f.Metadata() != nil {
		t.Errorf("Metadata = %v, want nil", f.Metadata())
	}
}

func TestOpenFileFP8(t *testing.T) {
	// Written by this package's writer: F8 dtypes go out under their
	// safetensors names and come back as the runtime's F8 dtypes, beside
	// the other dtypes, with offsets and metadata intact.
	p := filepath.Join(t.TempDir(), "fp8.safetensors")
	ts := []NamedTensor{
		{Name: "w", DType: runtime.F8E4M3, Shape: []int{2, 3}, Data: []byte{0x38, 0xb8, 0x00, 0x7e, 0x01, 0x40}},
		{Name: "w_scale", DType: runtime.BF16, Shape: []int{2, 1}, Data: []byte{0x80, 0x3f, 0x00, 0x40}},
		{Name: "e5", DType: runtime.F8E5M2, Shape: []int{1}, Data: []byte{0x3c}},
	}
	if err := WriteFile(p, ts, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	f, err := OpenFile(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, want := range ts {
		info, err := f.Info(want.Name)
		if err != nil {
			t.Fatal(err)
		}
		if info.DType != want.DType || !slices.Equal(info.Shape, want.Shape) || info.Size != int64(len(want.Data)) {
			t.Errorf("%s: %v %v %d bytes, want %v %v %d", want.Name, info.DType, info.Shape, info.Size, want.DType, want.Shape, len(want.Data))
		}
		b, err := f.Bytes(want.Name)
		if err != nil || !bytes.Equal(b, want.Data) {
			t.Errorf("%s: bytes %v (%v), want %v", want.Name, b, err, want.Data)
		}
	}
	if f.Metadata()["format"] != "pt" {
		t.Errorf("metadata %v lost", f.Metadata())
	}
}

func TestOpenFileFP8Fixtures(t *testing.T) {
	for _, dir := range []string{"../testdata/tiny-llama-fp8-channel", "../testdata/tiny-llama-fp8-block"} {
		f, err := OpenFile(filepath.Join(dir, "model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		q, err := f.Info("model.layers.0.mlp.down_proj.weight")
		if err != nil {
			t.Fatal(err)
		}
		if q.DType != runtime.F8E4M3 || !slices.Equal(q.Shape, []int{128, 320}) || q.Size != 128*320 {
			t.Errorf("%s: down_proj.weight %v %v %d bytes, want F8_E4M3 [128 320]", dir, q.DType, q.Shape, q.Size)
		}
		if e, _ := f.Info("model.embed_tokens.weight"); e.DType != runtime.BF16 {
			t.Errorf("%s: embed_tokens is %v, want BF16", dir, e.DType)
		}
		f.Close()
	}
}
