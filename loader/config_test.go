package loader

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReadConfigFileMissing(t *testing.T) {
	dir := t.TempDir()
	_, path, err := ReadConfigFile(dir)
	wantErr(t, err, filepath.Join(dir, "config.json"), "no such file")
	if path != filepath.Join(dir, ConfigFileName) {
		t.Errorf("path %q", path)
	}
}

func TestParseFieldsGarbled(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "config.json")
	os.WriteFile(p, []byte("{\n  \"hidden_size\": 64,\n  \"vocab_size\": 12x\n}"), 0o644)
	data, path, err := ReadConfigFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = ParseFields(data, path)
	wantErr(t, err, p, "invalid JSON at line 3, column 19", "invalid character 'x'")
	for _, bad := range []string{``, `null`, `[1]`, `"x"`, `{`} {
		_, err := ParseFields([]byte(bad), "m/config.json")
		wantErr(t, err, "m/config.json")
	}
}

// TestFields reads each kind of field, its default when absent or null, and
// keeps the first error, which names the source and the dotted field path.
func TestFields(t *testing.T) {
	r, err := ParseFields([]byte(`{"n": 8.0, "f": 1e-5, "s": "x", "b": true, "l": ["a","b"], "i": [1, 2],
		"one": 3, "nul": null, "o": {"k": "v", "bad": "no"}}`), "c.json")
	if err != nil {
		t.Fatal(err)
	}
	if r.Int("n", 0) != 8 || r.Float("f", 0) != 1e-5 || r.Str("s", "") != "x" || !r.Bool("b", false) ||
		len(r.Strings("l")) != 2 || len(r.Ints("i")) != 2 || r.Ints("one")[0] != 3 {
		t.Error("a present field read wrong")
	}
	if r.Int("nul", 7) != 7 || r.Positive("absent", 5) != 5 || r.Str("nul", "d") != "d" || r.Present("nul") || r.Object("nul") != nil {
		t.Error("an absent or null field did not give its default")
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	o := r.Object("o")
	if o.Str("k", "") != "v" {
		t.Error("object field read wrong")
	}
	o.Bool("bad", false)
	wantErr(t, o.Err(), "c.json", "field o.bad", "want true or false")
	r.Positive("missing", 0)
	r.Int("s", 0) // a second error is not kept
	wantErr(t, r.Err(), "field missing", "missing")
}
