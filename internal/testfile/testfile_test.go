package testfile

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"testing"
)

// TestReadGzipAndJSON: a .gz file reads as its uncompressed contents, a
// plain one as itself, and ReadJSON decodes either.
func TestReadGzipAndJSON(t *testing.T) {
	dir := t.TempDir()
	doc := []byte(`{"ids": [3, 1, 4]}`)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write(doc); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	plain, zipped := filepath.Join(dir, "a.json"), filepath.Join(dir, "a.json.gz")
	if err := os.WriteFile(plain, doc, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(zipped, gz.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{plain, zipped} {
		if got := Read(t, p); !bytes.Equal(got, doc) {
			t.Errorf("Read(%s) = %q, want %q", p, got, doc)
		}
		var v struct{ IDs []int }
		ReadJSON(t, p, &v)
		if len(v.IDs) != 3 || v.IDs[2] != 4 {
			t.Errorf("ReadJSON(%s) = %+v", p, v)
		}
	}
}
