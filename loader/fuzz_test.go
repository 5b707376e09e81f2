package loader

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

// FuzzSafetensorsHeader feeds arbitrary bytes, as a file, through OpenFile and
// every accessor: none may panic, and an accepted file must be self-consistent.
// The seed corpus is in testdata/fuzz/FuzzSafetensorsHeader.
func FuzzSafetensorsHeader(f *testing.F) {
	f.Add(rawSafetensors(`{"a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}}`, make([]byte, 8)))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, content []byte) {
		p := filepath.Join(dir, "f.safetensors")
		if err := os.WriteFile(p, content, 0o644); err != nil {
			t.Fatal(err)
		}
		sf, err := OpenFile(p)
		if err != nil {
			return
		}
		defer sf.Close()
		end := int64(8 + binary.LittleEndian.Uint64(content))
		for _, name := range sf.Names() {
			info, err := sf.Info(name)
			if err != nil {
				t.Fatalf("listed tensor %q has no info: %v", name, err)
			}
			if info.Offset < 8 || info.Size < 0 || info.Offset+info.Size > int64(len(content)) {
				t.Fatalf("tensor %q: offset %d size %d outside a %d-byte file", name, info.Offset, info.Size, len(content))
			}
			if info.NumElements()*int64(info.DType.Size()) != info.Size {
				t.Fatalf("tensor %q: shape %v of %v does not give size %d", name, info.Shape, info.DType, info.Size)
			}
			b, err := sf.Bytes(name)
			if err != nil || int64(len(b)) != info.Size {
				t.Fatalf("tensor %q: Bytes gave %d bytes, %v", name, len(b), err)
			}
			dst := make([]byte, info.Size)
			if err := sf.ReadInto(name, dst); err != nil || string(dst) != string(content[info.Offset:info.Offset+info.Size]) {
				t.Fatalf("tensor %q: ReadInto disagrees with the file: %v", name, err)
			}
			end += info.Size
		}
		if end != int64(len(content)) {
			t.Fatalf("accepted tensors cover up to byte %d of a %d-byte file", end, len(content))
		}
	})
}
