package testfile

import (
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"runtime"
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

// TestWantErr: an error containing every part passes; one missing a part,
// or no error, fails the test.
func TestWantErr(t *testing.T) {
	WantErr(t, errors.New("config c.json: field hidden_act: \"gelu\""), "hidden_act", "gelu")
	for _, tc := range []struct {
		name string
		err  error
	}{{"missing part", errors.New("field hidden_act")}, {"no error", nil}} {
		rec := &recorder{TB: t}
		done := make(chan struct{})
		go func() { // Fatalf ends the goroutine (runtime.Goexit), as in a test
			defer close(done)
			WantErr(rec, tc.err, "hidden_act", "gelu")
		}()
		<-done
		if !rec.failed {
			t.Errorf("%s: WantErr did not fail", tc.name)
		}
	}
}

// recorder is a testing.TB that records a failure instead of failing.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Errorf(string, ...any) { r.failed = true }
func (r *recorder) Fatalf(string, ...any) { r.failed = true; runtime.Goexit() }
