package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/loader/hub/hubtest"
)

// fakeHub serves testdata/tiny-llama as test-org/tiny-llama, with
// HF_ENDPOINT pointing at it and HF_HOME at a fresh directory.
func fakeHub(t *testing.T) (*hubtest.Server, string) {
	t.Helper()
	s, err := hubtest.New("test-org/tiny-llama", "../../testdata/tiny-llama")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	home := t.TempDir()
	t.Setenv("HF_ENDPOINT", s.URL)
	t.Setenv("HF_HOME", home)
	t.Setenv("HF_HUB_CACHE", "")
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HUGGING_FACE_HUB_TOKEN", "")
	t.Setenv("HF_TOKEN_PATH", "")
	return s, home
}

// TestPullCommand: infer pull fills the cache, prints the snapshot, draws
// a byte progress bar, and --model ORG/NAME then finds the checkpoint.
func TestPullCommand(t *testing.T) {
	s, home := fakeHub(t)
	t.Setenv("FT_FORCE_PROGRESS", "1")
	code, out, errOut := run(t, "pull", "test-org/tiny-llama")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	snap := filepath.Join(home, "hub", "models--test-org--tiny-llama", "snapshots", s.Commit)
	if strings.TrimSpace(out) != snap {
		t.Fatalf("stdout %q, want the snapshot %s", out, snap)
	}
	if !strings.Contains(errOut, "4 files, 4 downloaded") || !strings.Contains(errOut, "model.safetensors") || !strings.Contains(errOut, "MB") {
		t.Fatalf("stderr lacks the summary or a byte progress bar:\n%s", errOut)
	}
	for _, n := range []string{"config.json", "model.safetensors", "tokenizer.json", "generation_config.json"} {
		a, _ := os.ReadFile(filepath.Join(snap, n))
		b, _ := os.ReadFile(filepath.Join("../../testdata/tiny-llama", n))
		if len(a) == 0 || string(a) != string(b) {
			t.Fatalf("%s differs from the fixture", n)
		}
	}

	// Pulled by name, inspected by name: the same report as the directory's.
	inspect := func(model string) map[string]any {
		code, out, errOut := run(t, "inspect", "--model", model, "--json")
		if code != 0 {
			t.Fatalf("inspect %s: exit %d: %s", model, code, errOut)
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	byName, byDir := inspect("test-org/tiny-llama"), inspect("../../testdata/tiny-llama")
	if byName["parameters"] == nil || byName["parameters"] != byDir["parameters"] || byName["total_bytes"] != byDir["total_bytes"] {
		t.Fatalf("inspect by name %v, by directory %v", byName["parameters"], byDir["parameters"])
	}

	// Again: nothing to fetch.
	code, _, errOut = run(t, "pull", "test-org/tiny-llama@main")
	if code != 0 || !strings.Contains(errOut, "4 files, 0 downloaded") {
		t.Fatalf("second pull: exit %d: %s", code, errOut)
	}
}

func TestPullCommandErrors(t *testing.T) {
	s, _ := fakeHub(t)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"pull"}, 2, "give the model"},
		{[]string{"pull", "a/b", "c/d"}, 2, "one model per pull"},
		{[]string{"pull", "a/b/c"}, 2, "ORG/NAME"},
		{[]string{"pull", "test-org/tiny-llama@v1", "--revision", "v2"}, 2, "revision given twice"},
		{[]string{"pull", "test-org/nope"}, 1, "no such model or revision"},
		{[]string{"pull", "test-org/tiny-llama", "--revision", "v9"}, 1, "no such model or revision"},
	} {
		code, _, errOut := run(t, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
	s.Token = "hf_x"
	code, _, errOut := run(t, "pull", "test-org/tiny-llama")
	if code != 1 || !strings.Contains(errOut, "set HF_TOKEN") {
		t.Fatalf("gated: exit %d, %s", code, errOut)
	}
	t.Setenv("HF_TOKEN", "hf_x")
	if code, _, errOut := run(t, "pull", "test-org/tiny-llama"); code != 0 {
		t.Fatalf("with HF_TOKEN: exit %d, %s", code, errOut)
	}
	// --model with a name that is not cached says how to get it.
	code, _, errOut = run(t, "inspect", "--model", "test-org/other")
	if code != 1 || !strings.Contains(errOut, "infer pull test-org/other") {
		t.Fatalf("uncached model: exit %d, %s", code, errOut)
	}
}
