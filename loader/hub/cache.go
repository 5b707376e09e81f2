// Package hub finds checkpoints by their Hugging Face Hub names in the local
// Hugging Face cache and downloads them into it.
//
// The cache is the one huggingface_hub keeps (and that transformers, vLLM and
// most tools share):
//
//	<cache>/models--ORG--NAME/
//	    refs/main                      the commit hash that "main" named when pulled
//	    blobs/<sha256 or git-sha1>     file contents, named by their Hub ETag
//	    snapshots/<commit>/<file>      relative symlinks into blobs/
//
// where <cache> is $HF_HUB_CACHE, else $HF_HOME/hub, else
// $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub.
//
// Resolve turns a name (or a directory) into a snapshot directory that the
// loader opens like any checkpoint directory; Pull downloads a revision with
// the Hub's HTTP API, resumably and verified against the Hub's hashes.
package hub

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// DefaultRevision is the revision used when a name gives none.
const DefaultRevision = "main"

// HFHome is the Hugging Face home directory: $HF_HOME, else
// $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface.
func HFHome() string {
	if h := os.Getenv("HF_HOME"); h != "" {
		return expandHome(h)
	}
	if x := os.Getenv("XDG_CACHE_HOME"); x != "" {
		return filepath.Join(expandHome(x), "huggingface")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = "."
	}
	return filepath.Join(home, ".cache", "huggingface")
}

// CacheDir is the hub cache directory: $HF_HUB_CACHE, else HFHome()/hub.
func CacheDir() string {
	if c := os.Getenv("HF_HUB_CACHE"); c != "" {
		return expandHome(c)
	}
	return filepath.Join(HFHome(), "hub")
}

func expandHome(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, p[1:])
		}
	}
	return p
}

// A repo id is [ORG/]NAME of letters, digits, '-', '_' and '.', as the Hub
// allows them.
var repoPart = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// commitRe matches a full git commit hash.
var commitRe = regexp.MustCompile(`^[0-9a-f]{40}$`)

// ParseName splits "ORG/NAME[@REVISION]" into the repo id and the revision
// (DefaultRevision when none is given). A bare "NAME" (a repo without an
// organisation, such as "gpt2") is accepted too.
func ParseName(name string) (repo, revision string, err error) {
	repo, revision = name, DefaultRevision
	if i := strings.LastIndex(name, "@"); i >= 0 {
		repo, revision = name[:i], name[i+1:]
		if revision == "" {
			return "", "", fmt.Errorf("model name %q: empty revision after '@'", name)
		}
	}
	if err := checkRepo(repo); err != nil {
		return "", "", fmt.Errorf("model name %q: %w", name, err)
	}
	if err := checkRevision(revision); err != nil {
		return "", "", fmt.Errorf("model name %q: %w", name, err)
	}
	return repo, revision, nil
}

func checkRepo(repo string) error {
	parts := strings.Split(repo, "/")
	if len(parts) > 2 {
		return fmt.Errorf("a Hub model name is ORG/NAME, not %d parts separated by '/'", len(parts))
	}
	for _, p := range parts {
		if !repoPart.MatchString(p) || strings.Contains(p, "--") || strings.Contains(p, "..") || len(p) > 96 {
			return fmt.Errorf("%q is not a valid Hub name (letters, digits, '-', '_', '.'; no '--' or '..')", p)
		}
	}
	return nil
}

// checkRevision accepts a branch, tag or commit, including refs/pr/N; it
// becomes a path under refs/, so no empty, "." or ".." segments.
func checkRevision(rev string) error {
	if rev == "" {
		return errors.New("empty revision")
	}
	for _, seg := range strings.Split(rev, "/") {
		if seg == "" || seg == "." || seg == ".." || strings.ContainsAny(seg, "\\\x00") {
			return fmt.Errorf("revision %q is not a valid git ref", rev)
		}
	}
	return nil
}

// RepoDir is the cache folder of a model repo: <cache>/models--ORG--NAME.
func RepoDir(cache, repo string) string {
	return filepath.Join(cache, "models--"+strings.ReplaceAll(repo, "/", "--"))
}

// Resolve turns a --model value into a checkpoint directory. An existing
// directory is returned as is. Otherwise nameOrDir is read as
// ORG/NAME[@REVISION] and looked up in CacheDir(): refs/<REVISION> (default
// main) names a commit, and snapshots/<commit>/ is returned; a 40-hex
// REVISION names the snapshot directly. The snapshot must hold config.json
// (its files may be symlinks into blobs/; the loader follows them). Nothing
// is fetched: a model that is not cached is an error that suggests
// 'infer pull NAME'. A missing directory, or a Hub name not in the cache,
// is an error wrapping fs.ErrNotExist (os.ErrNotExist); the Hub is named
// only when nameOrDir is shaped like ORG/NAME.
func Resolve(nameOrDir string) (string, error) {
	return ResolveIn(CacheDir(), nameOrDir)
}

// ResolveIn is Resolve with an explicit cache directory.
func ResolveIn(cache, nameOrDir string) (string, error) {
	if nameOrDir == "" {
		return "", errors.New("empty model name")
	}
	st, statErr := os.Stat(nameOrDir)
	if statErr == nil {
		if st.IsDir() {
			return nameOrDir, nil
		}
		return "", fmt.Errorf("model %q is a file, not a checkpoint directory or a Hub name", nameOrDir)
	}
	if !errors.Is(statErr, fs.ErrNotExist) {
		return "", fmt.Errorf("model %q: %w", nameOrDir, statErr)
	}
	missing := func() error {
		var pe *fs.PathError
		if errors.As(statErr, &pe) {
			statErr = pe.Err
		}
		return fmt.Errorf("model %q: no such directory (%w)", nameOrDir, statErr)
	}
	repo, rev, err := ParseName(nameOrDir)
	if err != nil { // not a Hub name: a missing directory
		return "", missing()
	}
	repoDir := RepoDir(cache, repo)
	if _, err := os.Stat(repoDir); err != nil {
		if !strings.Contains(repo, "/") { // a bare NAME is looked up, but named as a directory
			return "", missing()
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("model %q: no such directory, and reading the Hugging Face cache: %w", nameOrDir, err)
		}
		return "", fmt.Errorf("model %q: no such directory, and not in the Hugging Face cache (looked for %s); run 'infer pull %s' to download it: %w",
			nameOrDir, repoDir, nameOrDir, fs.ErrNotExist)
	}
	commit, err := refCommit(repoDir, rev)
	if err != nil {
		return "", fmt.Errorf("model %q: %w; run 'infer pull %s' to download it", nameOrDir, err, nameOrDir)
	}
	snap := filepath.Join(repoDir, "snapshots", commit)
	if st, err := os.Stat(snap); err != nil || !st.IsDir() {
		return "", fmt.Errorf("model %q: revision %s names commit %s, but %s is missing; run 'infer pull %s' to download it",
			nameOrDir, rev, commit, snap, nameOrDir)
	}
	cfg := filepath.Join(snap, "config.json")
	if _, err := os.Stat(cfg); err != nil {
		why := "missing"
		if _, lerr := os.Lstat(cfg); lerr == nil {
			why = "a broken link into blobs/"
		}
		return "", fmt.Errorf("model %q: incomplete snapshot %s: config.json is %s; run 'infer pull %s' to complete it",
			nameOrDir, snap, why, nameOrDir)
	}
	return snap, nil
}

// refCommit is the commit a revision names in repoDir: refs/<rev>'s content,
// or rev itself when it is a commit hash with a snapshot.
func refCommit(repoDir, rev string) (string, error) {
	if commitRe.MatchString(rev) {
		if _, err := os.Stat(filepath.Join(repoDir, "snapshots", rev)); err == nil {
			return rev, nil
		}
	}
	ref := filepath.Join(repoDir, "refs", filepath.FromSlash(rev))
	data, err := os.ReadFile(ref)
	if errors.Is(err, fs.ErrNotExist) {
		if commitRe.MatchString(rev) {
			return "", fmt.Errorf("commit %s has no snapshot in %s", rev, filepath.Join(repoDir, "snapshots"))
		}
		return "", fmt.Errorf("revision %q is not in the cache (no %s)", rev, ref)
	}
	if err != nil {
		return "", err
	}
	commit := strings.TrimSpace(string(data))
	if !commitRe.MatchString(commit) {
		return "", fmt.Errorf("%s holds %q, not a commit hash", ref, commit)
	}
	return commit, nil
}
