package hub

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// DefaultEndpoint is the Hub used when neither Options.Endpoint nor
// $HF_ENDPOINT is set.
const DefaultEndpoint = "https://huggingface.co"

// checkpointFiles are the top-level files a checkpoint needs, besides
// *.safetensors (Pull's default selection).
var checkpointFiles = map[string]bool{
	"config.json":                  true,
	"generation_config.json":       true,
	"tokenizer.json":               true,
	"tokenizer_config.json":        true,
	"special_tokens_map.json":      true,
	"model.safetensors.index.json": true,
}

// IsCheckpointFile reports whether Pull fetches a repo file by default: the
// top-level config, tokenizer and safetensors files (not, for example,
// original/consolidated.safetensors or pytorch_model.bin).
func IsCheckpointFile(name string) bool {
	if strings.Contains(name, "/") {
		return false
	}
	return checkpointFiles[name] || strings.HasSuffix(name, ".safetensors")
}

// Options configure Pull. The zero value pulls a checkpoint's files from
// $HF_ENDPOINT (or huggingface.co) into CacheDir() with $HF_TOKEN.
type Options struct {
	// Endpoint is the Hub's base URL; default $HF_ENDPOINT, else DefaultEndpoint.
	Endpoint string
	// Token is sent as "Authorization: Bearer <token>"; default $HF_TOKEN,
	// else the file $HF_TOKEN_PATH, else HFHome()/token; none when absent.
	Token string
	// CacheDir is the hub cache; default CacheDir().
	CacheDir string
	// AllFiles fetches every file of the revision, not just the checkpoint's
	// (see IsCheckpointFile).
	AllFiles bool
	// Client makes the requests; default a client with no overall timeout
	// (downloads are long; cancel with the context).
	Client *http.Client
	// Retries is how often one file's download is resumed after a broken
	// connection or a 5xx answer before Pull gives up; default 5, <0 for none.
	Retries int
	// Progress, when set, is called as a file downloads with the bytes of
	// that file done so far and its size (already cached files are not
	// reported). Calls come from Pull's goroutine.
	Progress func(file string, done, total int64)
}

// Result describes a finished Pull.
type Result struct {
	Dir        string   // the snapshot directory, what Resolve returns
	Commit     string   // the commit the revision named
	Files      []string // the repo files now in Dir, in the Hub's order
	Downloaded int      // files fetched over the network
	Bytes      int64    // bytes received
}

// fileInfo is one sibling of the model-info answer with what verifies it.
type fileInfo struct {
	name   string
	size   int64  // -1 when the Hub gave none
	sha256 string // LFS files: the content's sha256
	blobID string // the git object id (of the LFS pointer for LFS files)
}

// etag is the file's blob name: the sha256 for LFS files, else the git sha1,
// as the Hub's ETag / X-Linked-Etag headers give them.
func (f fileInfo) etag() string {
	if f.sha256 != "" {
		return f.sha256
	}
	return f.blobID
}

// modelInfo is the part of GET /api/models/{repo}/revision/{rev}?blobs=true
// that Pull reads.
type modelInfo struct {
	SHA      string `json:"sha"`
	Siblings []struct {
		RFilename string `json:"rfilename"`
		Size      *int64 `json:"size"`
		BlobID    string `json:"blobId"`
		LFS       *struct {
			SHA256 string `json:"sha256"`
			Size   int64  `json:"size"`
		} `json:"lfs"`
	} `json:"siblings"`
}

var hexRe = regexp.MustCompile(`^[0-9a-f]+$`)

// Pull downloads revision (default main) of the model repo ("ORG/NAME") into
// the hub cache, laid out as huggingface_hub does: each file goes to
// blobs/<etag> (through blobs/<etag>.incomplete, resumed with a Range request
// after a broken connection or an earlier interrupted Pull), is checked
// against the Hub's size and sha256 (LFS) or git sha1 (other files), and is
// linked from snapshots/<commit>/<file>; refs/<revision> is written last.
// Files already in the snapshot are not fetched again. A file that fails
// verification is deleted and Pull fails naming it and both hashes; a
// cancelled ctx stops Pull promptly, leaving the .incomplete file to resume.
func Pull(ctx context.Context, repo, revision string, opts Options) (*Result, error) {
	if revision == "" {
		revision = DefaultRevision
	}
	if err := checkRepo(repo); err != nil {
		return nil, fmt.Errorf("pull %q: %w", repo, err)
	}
	if err := checkRevision(revision); err != nil {
		return nil, fmt.Errorf("pull %q: %w", repo, err)
	}
	c := newClient(opts)
	info, err := c.modelInfo(ctx, repo, revision)
	if err != nil {
		return nil, err
	}
	files, err := selectFiles(repo, revision, info, opts.AllFiles)
	if err != nil {
		return nil, err
	}
	repoDir := RepoDir(c.cache, repo)
	snap := filepath.Join(repoDir, "snapshots", info.SHA)
	res := &Result{Dir: snap, Commit: info.SHA}
	for _, f := range files {
		fetched, n, err := c.place(ctx, repo, repoDir, info.SHA, f)
		res.Bytes += n
		if err != nil {
			return res, err
		}
		if fetched {
			res.Downloaded++
		}
		res.Files = append(res.Files, f.name)
	}
	if revision != info.SHA {
		ref := filepath.Join(repoDir, "refs", filepath.FromSlash(revision))
		if err := writeFileAtomic(ref, []byte(info.SHA)); err != nil {
			return res, fmt.Errorf("pull %s: writing %s: %w", repo, ref, err)
		}
	}
	return res, nil
}

// selectFiles checks the model info and picks the files to fetch.
func selectFiles(repo, revision string, info *modelInfo, all bool) ([]fileInfo, error) {
	if !commitRe.MatchString(info.SHA) {
		return nil, fmt.Errorf("pull %s@%s: the Hub's answer has no commit hash (sha %q)", repo, revision, info.SHA)
	}
	var files []fileInfo
	safetensors := false
	for _, s := range info.Siblings {
		name := s.RFilename
		if !validRepoPath(name) {
			return nil, fmt.Errorf("pull %s@%s: the Hub lists an unsafe file name %q", repo, revision, name)
		}
		if !all && !IsCheckpointFile(name) {
			continue
		}
		f := fileInfo{name: name, size: -1, blobID: strings.ToLower(s.BlobID)}
		if s.Size != nil {
			f.size = *s.Size
		}
		if s.LFS != nil {
			f.sha256, f.size = strings.ToLower(s.LFS.SHA256), s.LFS.Size
			if len(f.sha256) != 64 || !hexRe.MatchString(f.sha256) {
				return nil, fmt.Errorf("pull %s@%s: %s: the Hub gives LFS sha256 %q, not 64 hex digits", repo, revision, name, s.LFS.SHA256)
			}
		}
		if f.blobID != "" && (len(f.blobID) != 40 || !hexRe.MatchString(f.blobID)) {
			return nil, fmt.Errorf("pull %s@%s: %s: the Hub gives blob id %q, not 40 hex digits", repo, revision, name, s.BlobID)
		}
		if strings.HasSuffix(name, ".safetensors") {
			safetensors = true
		}
		files = append(files, f)
	}
	if !all && !safetensors {
		return nil, fmt.Errorf("pull %s@%s: the repo has no top-level .safetensors files (FlexTensor reads only safetensors); --all-files fetches every file anyway", repo, revision)
	}
	return files, nil
}

// validRepoPath accepts a relative slash-separated path with no empty, "."
// or ".." segments, so that it stays inside the snapshot directory.
func validRepoPath(p string) bool {
	if p == "" || strings.ContainsAny(p, "\\\x00") || path.IsAbs(p) {
		return false
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// client holds what one Pull's requests share.
type client struct {
	endpoint, token, cache string
	http                   *http.Client
	retries                int
	progress               func(string, int64, int64)
}

func newClient(o Options) *client {
	c := &client{endpoint: o.Endpoint, token: o.Token, cache: o.CacheDir, retries: o.Retries, progress: o.Progress}
	if c.endpoint == "" {
		c.endpoint = os.Getenv("HF_ENDPOINT")
	}
	if c.endpoint == "" {
		c.endpoint = DefaultEndpoint
	}
	c.endpoint = strings.TrimRight(c.endpoint, "/")
	if c.token == "" {
		c.token = Token()
	}
	if c.cache == "" {
		c.cache = CacheDir()
	}
	hc := http.Client{}
	if o.Client != nil {
		hc = *o.Client
	}
	if hc.CheckRedirect == nil {
		// Large files redirect to a CDN on another host: the token stays
		// with the Hub.
		hc.CheckRedirect = func(r *http.Request, via []*http.Request) error {
			if len(via) >= 10 {
				return errors.New("stopped after 10 redirects")
			}
			if r.URL.Host != via[0].URL.Host {
				r.Header.Del("Authorization")
			}
			return nil
		}
	}
	c.http = &hc
	if c.retries == 0 {
		c.retries = 5
	}
	return c
}

// Token is the Hub token from the environment: $HF_TOKEN, else
// $HUGGING_FACE_HUB_TOKEN, else the file $HF_TOKEN_PATH, else HFHome()/token;
// "" when there is none.
func Token() string {
	for _, v := range []string{"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"} {
		if t := strings.TrimSpace(os.Getenv(v)); t != "" {
			return t
		}
	}
	p := os.Getenv("HF_TOKEN_PATH")
	if p == "" {
		p = filepath.Join(HFHome(), "token")
	}
	if data, err := os.ReadFile(expandHome(p)); err == nil {
		return strings.TrimSpace(string(data))
	}
	return ""
}

func (c *client) request(ctx context.Context, method, u string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", "flextensor-go")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

// modelInfo fetches GET {endpoint}/api/models/{repo}/revision/{rev}?blobs=true.
func (c *client) modelInfo(ctx context.Context, repo, revision string) (*modelInfo, error) {
	u := c.endpoint + "/api/models/" + repo + "/revision/" + url.PathEscape(revision) + "?blobs=true"
	req, err := c.request(ctx, http.MethodGet, u)
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", repo, err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("pull %s@%s: asking the Hub (%s): %w", repo, revision, c.endpoint, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, c.statusError(resp, repo, revision, "")
	}
	var info modelInfo
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&info); err != nil {
		return nil, fmt.Errorf("pull %s@%s: the Hub's model info (%s) is not valid JSON: %w", repo, revision, u, err)
	}
	return &info, nil
}

// statusError turns a failed answer into an error a user can act on.
func (c *client) statusError(resp *http.Response, repo, revision, file string) error {
	what := repo + "@" + revision
	if file != "" {
		what += ": " + file
	}
	code := resp.Header.Get("X-Error-Code")
	msg := resp.Header.Get("X-Error-Message")
	detail := ""
	if msg != "" {
		detail = " (the Hub says: " + msg + ")"
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized && c.token == "":
		return fmt.Errorf("pull %s: 401 Unauthorized: the model is gated or private, or does not exist: set HF_TOKEN to a token with access%s", what, detail)
	case resp.StatusCode == http.StatusUnauthorized:
		return fmt.Errorf("pull %s: 401 Unauthorized: the model is gated or private and the token (HF_TOKEN) has no access, or the model does not exist%s", what, detail)
	case resp.StatusCode == http.StatusForbidden || code == "GatedRepo":
		return fmt.Errorf("pull %s: %s: the model is gated: accept its terms on the Hub, then set HF_TOKEN to a token of that account%s", what, resp.Status, detail)
	case resp.StatusCode == http.StatusNotFound && code == "EntryNotFound":
		return fmt.Errorf("pull %s: 404: no such file in that revision%s", what, detail)
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("pull %s: 404: no such model or revision on %s%s", what, c.endpoint, detail)
	}
	return fmt.Errorf("pull %s: the Hub answered %s%s", what, resp.Status, detail)
}

// place makes snapshots/<commit>/<f.name> link to a verified blob, fetching
// the blob unless it is already there. It reports whether it fetched and the
// bytes received.
func (c *client) place(ctx context.Context, repo, repoDir, commit string, f fileInfo) (bool, int64, error) {
	pointer := filepath.Join(repoDir, "snapshots", commit, filepath.FromSlash(f.name))
	if st, err := os.Stat(pointer); err == nil && st.Mode().IsRegular() && (f.size < 0 || st.Size() == f.size) {
		return false, 0, nil
	}
	etag := f.etag()
	if etag == "" { // an old or unusual Hub: ask the file's headers, as huggingface_hub does
		var err error
		if etag, err = c.headETag(ctx, repo, commit, &f); err != nil {
			return false, 0, err
		}
	}
	blob := filepath.Join(repoDir, "blobs", etag)
	fetched, n := false, int64(0)
	if st, err := os.Stat(blob); err != nil || (f.size >= 0 && st.Size() != f.size) {
		if err := os.MkdirAll(filepath.Dir(blob), 0o755); err != nil {
			return false, 0, fmt.Errorf("pull %s: %w", repo, err)
		}
		var err error
		n, err = c.download(ctx, repo, commit, f, blob)
		if err != nil {
			return false, n, err
		}
		fetched = true
	}
	if err := os.MkdirAll(filepath.Dir(pointer), 0o755); err != nil {
		return fetched, n, fmt.Errorf("pull %s: %w", repo, err)
	}
	rel, err := filepath.Rel(filepath.Dir(pointer), blob)
	if err != nil {
		return fetched, n, fmt.Errorf("pull %s: %w", repo, err)
	}
	// A link made beside the pointer and renamed onto it: the snapshot path
	// is either absent or a complete file.
	tmp := pointer + ".link-tmp"
	_ = os.Remove(tmp)
	if err := os.Symlink(rel, tmp); err != nil {
		return fetched, n, fmt.Errorf("pull %s: linking %s: %w", repo, f.name, err)
	}
	if err := os.Rename(tmp, pointer); err != nil {
		_ = os.Remove(tmp)
		return fetched, n, fmt.Errorf("pull %s: linking %s: %w", repo, f.name, err)
	}
	return fetched, n, nil
}

// fileURL is {endpoint}/{repo}/resolve/{commit}/{file}.
func (c *client) fileURL(repo, commit, name string) string {
	segs := strings.Split(name, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return c.endpoint + "/" + repo + "/resolve/" + commit + "/" + strings.Join(segs, "/")
}

// headETag reads a file's ETag from a HEAD request that follows only
// same-host redirects, where the Hub puts X-Linked-Etag for LFS files, and
// fills in f.size from X-Linked-Size or Content-Length when it is unknown.
func (c *client) headETag(ctx context.Context, repo, commit string, f *fileInfo) (string, error) {
	req, err := c.request(ctx, http.MethodHead, c.fileURL(repo, commit, f.name))
	if err != nil {
		return "", err
	}
	req.Header.Set("Accept-Encoding", "identity")
	hc := *c.http
	hc.CheckRedirect = func(r *http.Request, via []*http.Request) error {
		if len(via) >= 10 || r.URL.Host != via[0].URL.Host {
			return http.ErrUseLastResponse
		}
		return nil
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("pull %s: %s: %w", repo, f.name, err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 400 {
		return "", c.statusError(resp, repo, commit, f.name)
	}
	if f.size < 0 {
		size := resp.Header.Get("X-Linked-Size")
		if size == "" && resp.StatusCode == http.StatusOK {
			size = resp.Header.Get("Content-Length")
		}
		if n, err := strconv.ParseInt(size, 10, 64); err == nil && n >= 0 {
			f.size = n
		}
	}
	etag := resp.Header.Get("X-Linked-Etag")
	if etag == "" {
		etag = resp.Header.Get("ETag")
	}
	etag = strings.Trim(strings.TrimPrefix(etag, "W/"), `"`)
	if etag == "" || !validRepoPath(etag) || strings.Contains(etag, "/") {
		return "", fmt.Errorf("pull %s: %s: the Hub gave no usable ETag (%q)", repo, f.name, etag)
	}
	return etag, nil
}

// errRetry marks failures worth resuming after: a broken connection, a 5xx.
type errRetry struct{ err error }

func (e errRetry) Error() string { return e.err.Error() }
func (e errRetry) Unwrap() error { return e.err }

// download fetches f into blob through blob.incomplete, resuming what an
// earlier attempt left there, and renames it into place once verified.
func (c *client) download(ctx context.Context, repo, commit string, f fileInfo, blob string) (int64, error) {
	part := blob + ".incomplete"
	out, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return 0, fmt.Errorf("pull %s: %w", repo, err)
	}
	defer out.Close()
	v := newVerifier(f)
	have, err := v.resume(out, f.size)
	if err != nil {
		return 0, fmt.Errorf("pull %s: %s: reading the partial download %s: %w", repo, f.name, part, err)
	}
	if c.progress != nil {
		c.progress(f.name, have, f.size)
	}
	var received int64
	for attempt := 0; ; attempt++ {
		if f.size >= 0 && have == f.size {
			break
		}
		n, done, err := c.fetchFrom(ctx, repo, commit, f, out, v, &have)
		received += n
		if err == nil && done {
			break
		}
		if ctx.Err() != nil {
			_ = out.Sync()
			return received, fmt.Errorf("pull %s: %s: stopped after %d of %d bytes (the next pull resumes): %w", repo, f.name, have, f.size, ctx.Err())
		}
		var retry errRetry
		if err != nil && !errors.As(err, &retry) {
			return received, err
		}
		if attempt >= c.retries {
			return received, fmt.Errorf("pull %s: %s: giving up after %d attempts at %d of %d bytes (the next pull resumes): %w", repo, f.name, attempt+1, have, f.size, err)
		}
		select {
		case <-time.After(time.Duration(min(attempt+1, 4)) * 250 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	if err := v.check(have); err != nil {
		out.Close()
		_ = os.Remove(part)
		return received, fmt.Errorf("pull %s: %s: %w; the download was deleted", repo, f.name, err)
	}
	if err := out.Sync(); err != nil {
		return received, fmt.Errorf("pull %s: %w", repo, err)
	}
	if err := out.Close(); err != nil {
		return received, fmt.Errorf("pull %s: %w", repo, err)
	}
	if err := os.Rename(part, blob); err != nil {
		return received, fmt.Errorf("pull %s: %w", repo, err)
	}
	return received, nil
}

// fetchFrom makes one GET for f from byte *have on, appending to out. It
// returns the bytes received and whether the body ended normally.
func (c *client) fetchFrom(ctx context.Context, repo, commit string, f fileInfo, out *os.File, v *verifier, have *int64) (int64, bool, error) {
	req, err := c.request(ctx, http.MethodGet, c.fileURL(repo, commit, f.name))
	if err != nil {
		return 0, false, err
	}
	req.Header.Set("Accept-Encoding", "identity") // sizes and hashes are of the stored bytes
	if *have > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", *have))
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, false, errRetry{fmt.Errorf("pull %s: %s: %w", repo, f.name, err)}
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusPartialContent:
		if start, ok := contentRangeStart(resp.Header.Get("Content-Range")); !ok || start != *have {
			// Not the range asked for: start over.
			err := errRetry{fmt.Errorf("pull %s: %s: the server sent range %q for bytes=%d-", repo, f.name, resp.Header.Get("Content-Range"), *have)}
			if rerr := v.restart(out); rerr != nil {
				return 0, false, rerr
			}
			*have = 0
			return 0, false, err
		}
	case resp.StatusCode == http.StatusOK:
		if *have > 0 { // the server ignored Range: the body is the whole file
			if err := v.restart(out); err != nil {
				return 0, false, err
			}
			*have = 0
		}
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable:
		if err := v.restart(out); err != nil {
			return 0, false, err
		}
		*have = 0
		return 0, false, errRetry{fmt.Errorf("pull %s: %s: the server refused the resume range", repo, f.name)}
	case resp.StatusCode >= 500:
		return 0, false, errRetry{c.statusError(resp, repo, commit, f.name)}
	default:
		return 0, false, c.statusError(resp, repo, commit, f.name)
	}
	if _, err := out.Seek(*have, io.SeekStart); err != nil {
		return 0, false, err
	}
	buf := make([]byte, 1<<20)
	var n int64
	for {
		k, rerr := resp.Body.Read(buf)
		if k > 0 {
			if f.size >= 0 && *have+int64(k) > f.size {
				_ = v.restart(out)
				*have = 0
				return n, false, fmt.Errorf("pull %s: %s: the server sent more than the Hub's size of %d bytes; the download was deleted", repo, f.name, f.size)
			}
			if _, err := out.Write(buf[:k]); err != nil {
				return n, false, fmt.Errorf("pull %s: %s: %w", repo, f.name, err)
			}
			v.Write(buf[:k])
			n += int64(k)
			*have += int64(k)
			if c.progress != nil {
				c.progress(f.name, *have, f.size)
			}
		}
		if rerr == io.EOF {
			if f.size >= 0 && *have < f.size {
				return n, false, errRetry{fmt.Errorf("pull %s: %s: the connection ended at %d of %d bytes", repo, f.name, *have, f.size)}
			}
			return n, true, nil
		}
		if rerr != nil {
			return n, false, errRetry{fmt.Errorf("pull %s: %s: %w", repo, f.name, rerr)}
		}
	}
}

// contentRangeStart parses the first byte of "bytes N-M/T".
func contentRangeStart(h string) (int64, bool) {
	rest, ok := strings.CutPrefix(h, "bytes ")
	if !ok {
		return 0, false
	}
	first, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(first, 10, 64)
	return n, err == nil
}

// verifier hashes a download as it is written: sha256 for LFS files, the git
// blob sha1 ("blob <size>\x00" + content) for others when the Hub gave one.
type verifier struct {
	f   fileInfo
	h   hash.Hash
	alg string
}

func newVerifier(f fileInfo) *verifier {
	v := &verifier{f: f}
	v.reset()
	return v
}

func (v *verifier) reset() {
	switch {
	case v.f.sha256 != "":
		v.h, v.alg = sha256.New(), "sha256"
	case v.f.blobID != "" && v.f.size >= 0:
		v.h, v.alg = sha1.New(), "git sha1"
		fmt.Fprintf(v.h, "blob %d\x00", v.f.size)
	default:
		v.h, v.alg = nil, ""
	}
}

// Write adds downloaded bytes to the hash.
func (v *verifier) Write(p []byte) {
	if v.h != nil {
		v.h.Write(p)
	}
}

// resume hashes what a partial file already holds and returns its length;
// a partial file longer than the expected size is emptied.
func (v *verifier) resume(out *os.File, size int64) (int64, error) {
	st, err := out.Stat()
	if err != nil {
		return 0, err
	}
	have := st.Size()
	if size >= 0 && have > size {
		return 0, v.restart(out)
	}
	if v.h != nil && have > 0 {
		if _, err := io.Copy(v.h, io.NewSectionReader(out, 0, have)); err != nil {
			return 0, err
		}
	}
	return have, nil
}

// restart empties the partial file and the hash.
func (v *verifier) restart(out *os.File) error {
	v.reset()
	return out.Truncate(0)
}

// check compares the finished download with the Hub's size and hash.
func (v *verifier) check(have int64) error {
	if v.f.size >= 0 && have != v.f.size {
		return fmt.Errorf("size mismatch: the Hub says %d bytes, the download has %d", v.f.size, have)
	}
	if v.h == nil {
		return nil
	}
	want := v.f.sha256
	if v.alg != "sha256" {
		want = v.f.blobID
	}
	if got := hex.EncodeToString(v.h.Sum(nil)); got != want {
		return fmt.Errorf("%s mismatch: the Hub says %s, the download has %s", v.alg, want, got)
	}
	return nil
}

// writeFileAtomic writes data to name through a temporary file and a rename.
func writeFileAtomic(name string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(name), ".tmp-ref-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), name)
}
