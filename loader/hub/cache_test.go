package hub_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/loader/hub"
)

const commitA = "0123456789abcdef0123456789abcdef01234567"

// buildCache lays the fixture out by hand as huggingface_hub would:
// blobs/<name> files, snapshots/<commit>/<file> relative symlinks, and
// refs/main, returning the cache directory.
func buildCache(t *testing.T, repoName string, names []string) string {
	t.Helper()
	cache := t.TempDir()
	repoDir := filepath.Join(cache, "models--"+strings.ReplaceAll(repoName, "/", "--"))
	snap := filepath.Join(repoDir, "snapshots", commitA)
	for _, d := range []string{filepath.Join(repoDir, "blobs"), snap, filepath.Join(repoDir, "refs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i, n := range names {
		data, err := os.ReadFile(filepath.Join(fixture, n))
		if err != nil {
			t.Fatal(err)
		}
		blob := strings.Repeat(string(rune('a'+i)), 64)
		if err := os.WriteFile(filepath.Join(repoDir, "blobs", blob), data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..", "..", "blobs", blob), filepath.Join(snap, n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(repoDir, "refs", "main"), []byte(commitA), 0o644); err != nil {
		t.Fatal(err)
	}
	return cache
}

// TestResolveHandBuiltCache: names resolve to the snapshot, whose symlinked
// files read as the originals and open as a checkpoint.
func TestResolveHandBuiltCache(t *testing.T) {
	cache := buildCache(t, "Qwen/Qwen3-8B", checkpointNames)
	want := filepath.Join(cache, "models--Qwen--Qwen3-8B", "snapshots", commitA)
	for _, name := range []string{"Qwen/Qwen3-8B", "Qwen/Qwen3-8B@main", "Qwen/Qwen3-8B@" + commitA} {
		dir, err := hub.ResolveIn(cache, name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if dir != want {
			t.Fatalf("%s → %s, want %s", name, dir, want)
		}
	}
	sameAsFixture(t, want, checkpointNames)
	data, src, err := loader.ReadConfigFile(want)
	if err != nil {
		t.Fatalf("config through a symlink: %v", err)
	}
	if _, err := loader.ParseFields(data, src); err != nil || len(data) == 0 {
		t.Fatalf("config through a symlink: %d bytes, %v", len(data), err)
	}
	ck, err := loader.OpenCheckpoint(want)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if len(ck.Names()) == 0 {
		t.Fatal("no tensors through the symlinked snapshot")
	}
	// A bare name (no organisation) and HF_HUB_CACHE through Resolve.
	cache2 := buildCache(t, "gpt2", []string{"config.json"})
	t.Setenv("HF_HUB_CACHE", cache2)
	if dir, err := hub.Resolve("gpt2"); err != nil || !strings.HasPrefix(dir, cache2) {
		t.Fatalf("Resolve(gpt2) = %s, %v", dir, err)
	}
}

// TestResolveDirectoryWins: an existing directory is returned unchanged;
// a file is refused.
func TestResolveDirectoryWins(t *testing.T) {
	if dir, err := hub.ResolveIn(t.TempDir(), fixture); err != nil || dir != fixture {
		t.Fatalf("Resolve(%s) = %s, %v", fixture, dir, err)
	}
	_, err := hub.ResolveIn(t.TempDir(), filepath.Join(fixture, "config.json"))
	if err == nil || !strings.Contains(err.Error(), "is a file") {
		t.Fatalf("a file: err = %v", err)
	}
}

// TestResolveErrors: each way a name can fail says what is wrong.
func TestResolveErrors(t *testing.T) {
	cache := buildCache(t, "Qwen/Qwen3-8B", checkpointNames)
	repoDir := filepath.Join(cache, "models--Qwen--Qwen3-8B")

	_, err := hub.ResolveIn(cache, "Qwen/Qwen3-70B")
	if err == nil || !strings.Contains(err.Error(), "not in the Hugging Face cache") ||
		!strings.Contains(err.Error(), filepath.Join(cache, "models--Qwen--Qwen3-70B")) ||
		!strings.Contains(err.Error(), "infer pull Qwen/Qwen3-70B") {
		t.Errorf("missing model: %v", err)
	}
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing model: %v; want it to wrap os.ErrNotExist", err)
	}
	_, err = hub.ResolveIn(cache, "Qwen/Qwen3-8B@v2")
	if err == nil || !strings.Contains(err.Error(), `revision "v2" is not in the cache`) {
		t.Errorf("missing revision: %v", err)
	}
	// A missing directory, absolute or a bare relative name, wraps
	// os.ErrNotExist and does not speak of the Hub (not shaped ORG/NAME).
	for _, name := range []string{"/no/such/dir", "no-such-dir", "./a/b/c"} {
		_, err = hub.ResolveIn(cache, name)
		if err == nil || !strings.Contains(err.Error(), "no such directory") || !errors.Is(err, os.ErrNotExist) ||
			strings.Contains(err.Error(), "Hub") || strings.Contains(err.Error(), "Hugging Face") {
			t.Errorf("missing directory %q: %v; want \"no such directory\" wrapping os.ErrNotExist, without the Hub", name, err)
		}
	}
	_, err = hub.ResolveIn(cache, "")
	if err == nil {
		t.Error("empty name accepted")
	}

	// A ref naming a commit with no snapshot.
	other := strings.Repeat("f", 40)
	if err := os.WriteFile(filepath.Join(repoDir, "refs", "dev"), []byte(other+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = hub.ResolveIn(cache, "Qwen/Qwen3-8B@dev")
	if err == nil || !strings.Contains(err.Error(), "names commit "+other) || !strings.Contains(err.Error(), "is missing") {
		t.Errorf("ref without snapshot: %v", err)
	}
	// A ref holding garbage.
	if err := os.WriteFile(filepath.Join(repoDir, "refs", "bad"), []byte("not a hash"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err = hub.ResolveIn(cache, "Qwen/Qwen3-8B@bad"); err == nil || !strings.Contains(err.Error(), "not a commit hash") {
		t.Errorf("bad ref: %v", err)
	}
	// An incomplete snapshot: config.json's blob is gone.
	target, _ := os.Readlink(filepath.Join(repoDir, "snapshots", commitA, "config.json"))
	if err := os.Remove(filepath.Join(repoDir, "snapshots", commitA, target)); err != nil {
		t.Fatal(err)
	}
	_, err = hub.ResolveIn(cache, "Qwen/Qwen3-8B")
	if err == nil || !strings.Contains(err.Error(), "incomplete snapshot") || !strings.Contains(err.Error(), "broken link") {
		t.Errorf("broken config link: %v", err)
	}
	// No config.json at all.
	if err := os.Remove(filepath.Join(repoDir, "snapshots", commitA, "config.json")); err != nil {
		t.Fatal(err)
	}
	_, err = hub.ResolveIn(cache, "Qwen/Qwen3-8B")
	if err == nil || !strings.Contains(err.Error(), "config.json is missing") {
		t.Errorf("no config: %v", err)
	}
}

// TestParseName covers names, revisions and what is refused.
func TestParseName(t *testing.T) {
	for _, tc := range []struct{ in, repo, rev string }{
		{"Qwen/Qwen3-8B", "Qwen/Qwen3-8B", "main"},
		{"meta-llama/Llama-3.1-8B@refs/pr/3", "meta-llama/Llama-3.1-8B", "refs/pr/3"},
		{"gpt2@v1.0", "gpt2", "v1.0"},
	} {
		repo, rev, err := hub.ParseName(tc.in)
		if err != nil || repo != tc.repo || rev != tc.rev {
			t.Errorf("ParseName(%q) = %q, %q, %v", tc.in, repo, rev, err)
		}
	}
	for _, bad := range []string{"a/b/c", "a@", "../x", "a--b/c", "org/na me", "x@refs/../main", "/abs/path", "./rel"} {
		if _, _, err := hub.ParseName(bad); err == nil {
			t.Errorf("ParseName(%q) accepted", bad)
		}
	}
}
