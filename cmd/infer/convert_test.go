package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConvertGGUF: infer convert turns the trained stories260K GGUF into a
// directory run-model runs with its tokenizer, greedily continuing a
// prompt with llama2.c's reference story; bad flags are usage errors
// (exit 2) and a file of another format a runtime error naming it.
func TestConvertGGUF(t *testing.T) {
	src := "../../testdata/stories260K/stories260K.gguf"
	out := filepath.Join(t.TempDir(), "s260k")
	code, stdout, stderr := run(t, "convert", "--from", "gguf", "--in", src, "--out", out)
	if code != 0 || !strings.Contains(stdout, "5 layers") {
		t.Fatalf("convert: exit %d, %q, %q", code, stdout, stderr)
	}
	code, stdout, stderr = run(t, "run-model", "--model", out, "--prompt", "Once upon a time, there was a little girl named", "--max-new-tokens", "12")
	if code != 0 || !strings.HasPrefix(strings.TrimSpace(stdout), "Lily. She loved to play outside") {
		t.Errorf("run-model: exit %d, %q, %q", code, stdout, stderr)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--from", "onnx", "--in", src, "--out", out}, 2, `--from "onnx"`},
		{[]string{"--from", "gguf", "--out", out}, 2, "--in and --out"},
		{[]string{"--from", "gguf", "--in", src, "--out", out, "--dtype", "f16"}, 2, "--dtype"},
		{[]string{"--from", "gguf", "--in", "../../testdata/tiny-llama/config.json", "--out", t.TempDir()}, 1, "no GGUF magic"},
		{[]string{"--from", "llama2c", "--in", src, "--out", t.TempDir()}, 1, "llama2c"},
		// A non-empty --out is refused without --force, as make-model does.
		{[]string{"--from", "gguf", "--in", src, "--out", out}, 2, "already holds"},
	} {
		code, _, stderr := run(t, append([]string{"convert"}, c.args...)...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("convert %v: exit %d, %q; want exit %d naming %q", c.args, code, stderr, c.code, c.want)
		}
	}
	// --force replaces the checkpoint there: no stale shard stays.
	stale := filepath.Join(out, "model-00001-of-00002.safetensors")
	if err := os.WriteFile(stale, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = run(t, "convert", "--from", "gguf", "--in", src, "--out", out, "--force", "--dtype", "f32")
	if code != 0 {
		t.Fatalf("convert --force: exit %d, %q", code, stderr)
	}
	if _, err := os.Stat(stale); err == nil {
		t.Error("convert --force left the stale shard")
	}
}
