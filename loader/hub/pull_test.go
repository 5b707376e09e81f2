package hub_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/loader/hub"
	"github.com/flextensor-go/flextensor/loader/hub/hubtest"
)

const (
	repo    = "test-org/tiny-llama"
	fixture = "../../testdata/tiny-llama"
)

// checkpointNames are the fixture files a default pull fetches.
var checkpointNames = []string{"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"}

func newHub(t *testing.T) *hubtest.Server {
	t.Helper()
	s, err := hubtest.New(repo, fixture)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// opts points a pull at the fake hub and a fresh cache.
func opts(t *testing.T, s *hubtest.Server) hub.Options {
	return hub.Options{Endpoint: s.URL, CacheDir: t.TempDir(), Token: "-", Retries: -1}
}

// noToken clears the environment's token sources.
func noToken(t *testing.T) {
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HUGGING_FACE_HUB_TOKEN", "")
	t.Setenv("HF_TOKEN_PATH", filepath.Join(t.TempDir(), "none"))
}

// sameAsFixture checks dir's files byte for byte against the fixture.
func sameAsFixture(t *testing.T, dir string, names []string) {
	t.Helper()
	for _, n := range names {
		want, err := os.ReadFile(filepath.Join(fixture, n))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: %d bytes differ from the fixture's %d", n, len(got), len(want))
		}
	}
}

// TestPullThenResolve: a pull lays the cache out as huggingface_hub does
// (blobs named by ETag, relative symlinks, refs/main) and Resolve finds a
// snapshot that equals the fixture and opens as a checkpoint.
func TestPullThenResolve(t *testing.T) {
	noToken(t)
	s := newHub(t)
	o := opts(t, s)
	o.Token = ""
	var mu sync.Mutex
	last := map[string][2]int64{}
	o.Progress = func(file string, done, total int64) {
		mu.Lock()
		last[file] = [2]int64{done, total}
		mu.Unlock()
	}
	res, err := hub.Pull(context.Background(), repo, "", o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Commit != s.Commit || res.Downloaded != len(checkpointNames) || len(res.Files) != len(checkpointNames) {
		t.Fatalf("result %+v, want commit %s and %d files", res, s.Commit, len(checkpointNames))
	}
	repoDir := filepath.Join(o.CacheDir, "models--test-org--tiny-llama")
	ref, err := os.ReadFile(filepath.Join(repoDir, "refs", "main"))
	if err != nil || string(ref) != s.Commit {
		t.Fatalf("refs/main = %q, %v; want %s", ref, err, s.Commit)
	}
	for _, f := range s.Files() {
		pointer := filepath.Join(repoDir, "snapshots", s.Commit, f.Name)
		wanted := strings.Contains(strings.Join(checkpointNames, " "), f.Name)
		target, err := os.Readlink(pointer)
		if !wanted {
			if err == nil {
				t.Errorf("%s was pulled, but is not a checkpoint file", f.Name)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s is not a symlink: %v", f.Name, err)
		}
		etag := f.BlobID
		if f.LFS {
			etag = f.SHA256
		}
		if want := filepath.Join("..", "..", "blobs", etag); target != want {
			t.Errorf("%s links to %s, want %s", f.Name, target, want)
		}
		if got := last[f.Name]; got[0] != int64(len(f.Data)) || got[1] != int64(len(f.Data)) {
			t.Errorf("%s: last progress %v, want %d of %d", f.Name, got, len(f.Data), len(f.Data))
		}
	}
	for _, r := range s.Requests() {
		if strings.HasPrefix(r.Path, "/api/") && r.RawQuery != "blobs=true" {
			t.Errorf("model info asked without blobs=true: %+v", r)
		}
		if r.Authorization != "" {
			t.Errorf("a token was sent with none set: %+v", r)
		}
	}
	dir, err := hub.ResolveIn(o.CacheDir, repo)
	if err != nil {
		t.Fatal(err)
	}
	if dir != res.Dir {
		t.Fatalf("Resolve gave %s, Pull %s", dir, res.Dir)
	}
	sameAsFixture(t, dir, checkpointNames)
	ck, err := loader.OpenCheckpoint(dir)
	if err != nil {
		t.Fatalf("the snapshot does not open as a checkpoint: %v", err)
	}
	ck.Close()
	for _, name := range []string{repo + "@main", repo + "@" + s.Commit} {
		if d, err := hub.ResolveIn(o.CacheDir, name); err != nil || d != dir {
			t.Errorf("Resolve(%s) = %s, %v; want %s", name, d, err, dir)
		}
	}
}

// TestPullTwiceDownloadsNothing: a second pull of the same revision asks
// only for the model info.
func TestPullTwiceDownloadsNothing(t *testing.T) {
	s := newHub(t)
	o := opts(t, s)
	if _, err := hub.Pull(context.Background(), repo, "main", o); err != nil {
		t.Fatal(err)
	}
	before := len(s.Requests())
	res, err := hub.Pull(context.Background(), repo, "main", o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Downloaded != 0 || res.Bytes != 0 {
		t.Fatalf("second pull downloaded %d files, %d bytes", res.Downloaded, res.Bytes)
	}
	for _, r := range s.Requests()[before:] {
		if !strings.HasPrefix(r.Path, "/api/") {
			t.Errorf("second pull fetched %s", r.Path)
		}
	}
}

// TestPullAllFiles: --all-files fetches files a checkpoint does not need.
func TestPullAllFiles(t *testing.T) {
	s := newHub(t)
	o := opts(t, s)
	o.AllFiles = true
	res, err := hub.Pull(context.Background(), repo, "", o)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Files) != len(s.Files()) {
		t.Fatalf("pulled %v, want all %d files", res.Files, len(s.Files()))
	}
	sameAsFixture(t, res.Dir, []string{"reference.json", "tokenizer_reference.json"})
}

// TestPullResumesAfterCut: the server drops the connection after 100000
// bytes of the weights; Pull resumes with a Range request and completes.
func TestPullResumesAfterCut(t *testing.T) {
	s := newHub(t)
	s.CutAfter["model.safetensors"] = 100000
	o := opts(t, s)
	o.Retries = 2
	res, err := hub.Pull(context.Background(), repo, "", o)
	if err != nil {
		t.Fatal(err)
	}
	reqs := s.ContentRequests("model.safetensors")
	if len(reqs) != 2 || reqs[0].Range != "" || reqs[1].Range != "bytes=100000-" {
		t.Fatalf("content requests %+v, want a full GET then Range bytes=100000-", reqs)
	}
	sameAsFixture(t, res.Dir, checkpointNames)
}

// TestPullRestartsWhenRangeIgnored: a server that answers a Range request
// with 200 and the whole file gets a clean restart, not a doubled file.
func TestPullRestartsWhenRangeIgnored(t *testing.T) {
	s := newHub(t)
	s.CutAfter["model.safetensors"] = 100000
	s.IgnoreRange = true
	o := opts(t, s)
	o.Retries = 2
	res, err := hub.Pull(context.Background(), repo, "", o)
	if err != nil {
		t.Fatal(err)
	}
	if reqs := s.ContentRequests("model.safetensors"); len(reqs) != 2 || reqs[1].Range != "bytes=100000-" {
		t.Fatalf("content requests %+v", reqs)
	}
	sameAsFixture(t, res.Dir, checkpointNames)
}

// TestPullWithoutRetriesLeavesIncomplete: with no retries a cut download
// fails, leaves blobs/<sha256>.incomplete and no snapshot entry, and the
// next pull resumes it.
func TestPullWithoutRetriesLeavesIncomplete(t *testing.T) {
	s := newHub(t)
	s.CutAfter["model.safetensors"] = 65536
	o := opts(t, s)
	_, err := hub.Pull(context.Background(), repo, "", o)
	if err == nil || !strings.Contains(err.Error(), "model.safetensors") {
		t.Fatalf("err = %v, want a failed model.safetensors", err)
	}
	w := weights(t, s)
	repoDir := filepath.Join(o.CacheDir, "models--test-org--tiny-llama")
	st, err := os.Stat(filepath.Join(repoDir, "blobs", w.SHA256+".incomplete"))
	if err != nil || st.Size() != 65536 {
		t.Fatalf("incomplete blob: %v, %v; want 65536 bytes", st, err)
	}
	if _, err := os.Lstat(filepath.Join(repoDir, "snapshots", s.Commit, "model.safetensors")); err == nil {
		t.Fatal("a half-downloaded file is visible in the snapshot")
	}
	if _, err := os.Stat(filepath.Join(repoDir, "refs", "main")); err == nil {
		t.Fatal("refs/main written for an incomplete pull")
	}
	if _, err := hub.ResolveIn(o.CacheDir, repo); err == nil {
		t.Fatal("Resolve accepted an incomplete pull")
	}
	res, err := hub.Pull(context.Background(), repo, "", o)
	if err != nil {
		t.Fatal(err)
	}
	reqs := s.ContentRequests("model.safetensors")
	if got := reqs[len(reqs)-1].Range; got != "bytes=65536-" {
		t.Fatalf("resume asked Range %q, want bytes=65536-", got)
	}
	// The rest of the weights, then tokenizer.json, which comes after them.
	tok, err := os.Stat(filepath.Join(fixture, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(len(w.Data)-65536) + tok.Size(); res.Bytes != want {
		t.Fatalf("second pull received %d bytes, want %d", res.Bytes, want)
	}
	sameAsFixture(t, res.Dir, checkpointNames)
}

func weights(t *testing.T, s *hubtest.Server) *hubtest.File {
	for _, f := range s.Files() {
		if f.Name == "model.safetensors" {
			return f
		}
	}
	t.Fatal("no model.safetensors in the fixture")
	return nil
}

// TestPullRefusesCorruptFile: wrong bytes (right size) are refused, named,
// deleted and never placed; a corrupt non-LFS file fails its git sha1.
func TestPullRefusesCorruptFile(t *testing.T) {
	for _, tc := range []struct{ file, alg string }{{"model.safetensors", "sha256"}, {"config.json", "git sha1"}} {
		t.Run(tc.file, func(t *testing.T) {
			s := newHub(t)
			s.Corrupt[tc.file] = true
			o := opts(t, s)
			_, err := hub.Pull(context.Background(), repo, "", o)
			if err == nil {
				t.Fatal("a corrupted file was accepted")
			}
			var want string
			for _, f := range s.Files() {
				if f.Name == tc.file {
					want = f.BlobID
					if f.LFS {
						want = f.SHA256
					}
				}
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.file) || !strings.Contains(msg, tc.alg+" mismatch") || !strings.Contains(msg, want) {
				t.Fatalf("error %q does not name the file, the %s and the expected hash %s", msg, tc.alg, want)
			}
			repoDir := filepath.Join(o.CacheDir, "models--test-org--tiny-llama")
			if _, err := os.Lstat(filepath.Join(repoDir, "snapshots", s.Commit, tc.file)); err == nil {
				t.Fatal("the corrupted file was placed in the snapshot")
			}
			left, _ := filepath.Glob(filepath.Join(repoDir, "blobs", want+"*"))
			if len(left) != 0 {
				t.Fatalf("corrupt download left %v", left)
			}
		})
	}
}

// TestPullToken: the token is sent as a bearer header; a 401 without one
// says to set HF_TOKEN; HF_TOKEN and $HF_HOME/token are read.
func TestPullToken(t *testing.T) {
	s := newHub(t)
	s.Token = "hf_secret"
	noToken(t)
	o := opts(t, s)
	o.Token = ""
	_, err := hub.Pull(context.Background(), repo, "", o)
	if err == nil || !strings.Contains(err.Error(), "gated or private") || !strings.Contains(err.Error(), "set HF_TOKEN") {
		t.Fatalf("err = %v, want the HF_TOKEN message", err)
	}
	t.Setenv("HF_TOKEN", "wrong")
	if _, err := hub.Pull(context.Background(), repo, "", o); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("a wrong token: err = %v", err)
	}
	t.Setenv("HF_TOKEN", "hf_secret")
	before := len(s.Requests())
	if _, err := hub.Pull(context.Background(), repo, "", o); err != nil {
		t.Fatal(err)
	}
	for _, r := range s.Requests()[before:] {
		want := "Bearer hf_secret"
		if strings.HasPrefix(r.Path, "/cdn/") {
			want = "" // the CDN is another host
		}
		if r.Authorization != want {
			t.Errorf("%s sent Authorization %q, want %q", r.Path, r.Authorization, want)
		}
	}
	// The token file under HF_HOME.
	t.Setenv("HF_TOKEN", "")
	home := t.TempDir()
	t.Setenv("HF_HOME", home)
	t.Setenv("HF_TOKEN_PATH", "")
	if err := os.WriteFile(filepath.Join(home, "token"), []byte("hf_secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := hub.Token(); got != "hf_secret" {
		t.Fatalf("Token() = %q from $HF_HOME/token", got)
	}
	o.CacheDir = t.TempDir()
	if _, err := hub.Pull(context.Background(), repo, "", o); err != nil {
		t.Fatalf("token from $HF_HOME/token: %v", err)
	}
}

// TestPullEnvironment: HF_ENDPOINT and HF_HOME are honoured when Options
// leave them out.
func TestPullEnvironment(t *testing.T) {
	noToken(t)
	s := newHub(t)
	home := t.TempDir()
	t.Setenv("HF_ENDPOINT", s.URL+"/")
	t.Setenv("HF_HOME", home)
	t.Setenv("HF_HUB_CACHE", "")
	res, err := hub.Pull(context.Background(), repo, "", hub.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(home, "hub", "models--test-org--tiny-llama", "snapshots", s.Commit)
	if res.Dir != want {
		t.Fatalf("pulled into %s, want %s", res.Dir, want)
	}
	if dir, err := hub.Resolve(repo); err != nil || dir != want {
		t.Fatalf("Resolve = %s, %v", dir, err)
	}
	cache := t.TempDir()
	t.Setenv("HF_HUB_CACHE", cache)
	if hub.CacheDir() != cache {
		t.Fatalf("CacheDir() = %s with HF_HUB_CACHE=%s", hub.CacheDir(), cache)
	}
}

// TestPullErrors: unknown models and revisions, bad names.
func TestPullErrors(t *testing.T) {
	s := newHub(t)
	o := opts(t, s)
	for _, tc := range []struct{ repo, rev, want string }{
		{"test-org/nope", "", "no such model or revision"},
		{repo, "v9", "no such model or revision"},
		{"a/b/c", "", "ORG/NAME"},
		{"../x", "", "not a valid Hub name"},
		{repo, "../main", "not a valid git ref"},
	} {
		_, err := hub.Pull(context.Background(), tc.repo, tc.rev, o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Pull(%q, %q): err = %v, want %q", tc.repo, tc.rev, err, tc.want)
		}
	}
}

// TestPullCancel: cancelling mid-file stops Pull promptly and leaves a
// .incomplete that the next pull resumes.
func TestPullCancel(t *testing.T) {
	s := newHub(t)
	s.StallAfter["model.safetensors"] = 200000
	o := opts(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o.Progress = func(file string, done, total int64) {
		if file == "model.safetensors" && done == 200000 {
			cancel()
		}
	}
	t0 := time.Now()
	_, err := hub.Pull(ctx, repo, "", o)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Fatalf("cancel took %v", d)
	}
	w := weights(t, s)
	part := filepath.Join(o.CacheDir, "models--test-org--tiny-llama", "blobs", w.SHA256+".incomplete")
	if st, err := os.Stat(part); err != nil || st.Size() != 200000 {
		t.Fatalf("incomplete file %v, %v; want 200000 bytes", st, err)
	}
	delete(s.StallAfter, "model.safetensors")
	o.Progress = nil
	res, err := hub.Pull(context.Background(), repo, "", o)
	if err != nil {
		t.Fatal(err)
	}
	reqs := s.ContentRequests("model.safetensors")
	if got := reqs[len(reqs)-1].Range; got != "bytes=200000-" {
		t.Fatalf("resume Range %q", got)
	}
	sameAsFixture(t, res.Dir, checkpointNames)
}

// TestPullWithoutBlobMetadata: when the model info lists only file names,
// Pull learns each blob name from the resolve answer's X-Linked-Etag or
// ETag (a HEAD that does not follow the redirect to the CDN), and the
// cache layout is the same.
func TestPullWithoutBlobMetadata(t *testing.T) {
	s := newHub(t)
	s.NoBlobs = true
	o := opts(t, s)
	res, err := hub.Pull(context.Background(), repo, "", o)
	if err != nil {
		t.Fatal(err)
	}
	sameAsFixture(t, res.Dir, checkpointNames)
	heads := 0
	for _, r := range s.Requests() {
		if r.Method == http.MethodHead {
			heads++
			if strings.HasPrefix(r.Path, "/cdn/") {
				t.Errorf("the HEAD followed the redirect to %s", r.Path)
			}
		}
	}
	if heads != len(checkpointNames) {
		t.Fatalf("%d HEAD requests, want one per file (%d)", heads, len(checkpointNames))
	}
	w := weights(t, s)
	target, err := os.Readlink(filepath.Join(res.Dir, "model.safetensors"))
	if err != nil || filepath.Base(target) != w.SHA256 {
		t.Fatalf("model.safetensors links to %q (%v), want the blob named by its sha256", target, err)
	}

	// Sizes come from X-Linked-Size / Content-Length: a cut download is
	// resumed, not taken as complete.
	s.CutAfter["model.safetensors"] = 5000
	o.CacheDir = t.TempDir()
	o.Retries = 1
	res, err = hub.Pull(context.Background(), repo, "", o)
	if err != nil {
		t.Fatal(err)
	}
	if reqs := s.ContentRequests("model.safetensors"); reqs[len(reqs)-1].Range != "bytes=5000-" {
		t.Fatalf("no resume after a cut without blob metadata: %+v", reqs)
	}
	sameAsFixture(t, res.Dir, checkpointNames)
}
