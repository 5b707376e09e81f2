// Package testfile holds test helpers that need nothing of this module:
// reading test data files (plain or gzipped, raw or as JSON; it fails the
// test, naming the file, when one cannot be read) and checking an error's
// text. The package is for tests only (other packages' _test files import
// it).
package testfile

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"
)

// Read returns the contents of the file at path, gunzipped when its name
// ends in .gz.
func Read(t testing.TB, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if data, err = io.ReadAll(zr); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	return data
}

// ReadJSON decodes the JSON file at path (gunzipped when its name ends in
// .gz) into v.
func ReadJSON(t testing.TB, path string, v any) {
	t.Helper()
	if err := json.Unmarshal(Read(t, path), v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// WantErr fails t unless err is an error whose text contains every one of
// parts.
func WantErr(t testing.TB, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one containing %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not contain %q", err, p)
		}
	}
}
