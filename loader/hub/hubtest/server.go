// Package hubtest is a fake Hugging Face Hub for tests: an httptest server
// that serves the files of one local directory as one model repo, in the
// Hub's URL layout, with faults a test can switch on (a connection cut after
// N bytes, Range ignored, corrupted bytes, a required token, a stall).
//
// It answers
//
//	GET  /api/models/{repo}/revision/{rev}[?blobs=true]   model info: sha, siblings
//	GET  /{repo}/resolve/{rev}/{file}                     the file (LFS files: a 302 to /cdn/)
//	HEAD /{repo}/resolve/{rev}/{file}                     the same headers
//	GET  /cdn/{sha256}                                    LFS content, Range supported
//
// The /cdn/ paths are on a second server (CDN), as the Hub's LFS content is
// on another host.
//
// with the Hub's headers: X-Repo-Commit, ETag (the git sha1 of non-LFS
// files), X-Linked-Etag and X-Linked-Size (LFS files), Content-Range, and
// X-Error-Code on errors.
package hubtest

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// File is one served file with the metadata the Hub reports for it.
type File struct {
	Name   string
	Data   []byte // the true content (metadata is computed from it)
	LFS    bool   // stored in LFS: sha256 in the model info, served through /cdn/
	SHA256 string // of Data
	BlobID string // git sha1 of Data, or of the LFS pointer for LFS files
}

// Request is one request the server saw.
type Request struct {
	Method, Path, RawQuery, Range, Authorization string
}

// Server is the fake Hub. Set its fault fields before the requests they
// should affect; they are read under its lock.
type Server struct {
	*httptest.Server
	CDN    *httptest.Server // serves /cdn/{sha256}
	Repo   string           // "ORG/NAME"
	Commit string           // the commit hash "main" names

	mu    sync.Mutex
	files []*File
	log   []Request

	// CutAfter[name] = N: the next GET of that file's content sends N
	// bytes of the body, then drops the connection (one-shot).
	CutAfter map[string]int64
	// StallAfter[name] = N: every GET of that file's content sends N bytes,
	// then waits until the client goes away.
	StallAfter map[string]int64
	// IgnoreRange answers Range requests with 200 and the whole file.
	IgnoreRange bool
	// Corrupt[name]: serve the file with its first byte flipped (the
	// metadata still describes the true bytes).
	Corrupt map[string]bool
	// NoBlobs lists only file names in the model info, even with
	// ?blobs=true (as an older Hub would), so clients must read ETags.
	NoBlobs bool
	// Token, when set, is required as "Authorization: Bearer <Token>" on
	// /api and /resolve requests; others get 401.
	Token string
}

// New serves every regular file at the top of dir (and below it, as
// slash-separated names) as repo's files at one commit. Files named
// *.safetensors are LFS files.
func New(repo, dir string) (*Server, error) {
	s := &Server{Repo: repo, CutAfter: map[string]int64{}, StallAfter: map[string]int64{}, Corrupt: map[string]bool{}}
	commit := sha1.New()
	fmt.Fprintf(commit, "%s\x00", repo)
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		f := &File{Name: filepath.ToSlash(rel), Data: data, LFS: strings.HasSuffix(p, ".safetensors")}
		sum := sha256.Sum256(data)
		f.SHA256 = hex.EncodeToString(sum[:])
		f.BlobID = gitSHA1(data)
		if f.LFS {
			f.BlobID = gitSHA1([]byte(lfsPointer(f)))
		}
		fmt.Fprintf(commit, "%s %s\n", f.Name, f.BlobID)
		s.files = append(s.files, f)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(s.files) == 0 {
		return nil, fmt.Errorf("hubtest: no files in %s", dir)
	}
	sort.Slice(s.files, func(i, j int) bool { return s.files[i].Name < s.files[j].Name })
	s.Commit = hex.EncodeToString(commit.Sum(nil))
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	s.CDN = httptest.NewServer(http.HandlerFunc(s.serve))
	return s, nil
}

func gitSHA1(data []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(data))
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}

func lfsPointer(f *File) string {
	return fmt.Sprintf("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n", f.SHA256, len(f.Data))
}

// Files are the served files, sorted by name.
func (s *Server) Files() []*File {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*File(nil), s.files...)
}

// Requests returns the requests seen so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.log...)
}

// Close shuts both servers down.
func (s *Server) Close() {
	s.Server.Close()
	s.CDN.Close()
}

// ContentRequests returns the GETs that were answered with name's content
// so far: /cdn/{sha256} for LFS files, /{repo}/resolve/... for others.
func (s *Server) ContentRequests(name string) []Request {
	f := s.file(name)
	if f == nil {
		return nil
	}
	var out []Request
	for _, r := range s.Requests() {
		if r.Method != http.MethodGet {
			continue
		}
		if (f.LFS && r.Path == "/cdn/"+f.SHA256) || (!f.LFS && strings.Contains(r.Path, "/resolve/") && strings.HasSuffix(r.Path, "/"+name)) {
			out = append(out, r)
		}
	}
	return out
}

func (s *Server) file(name string) *File {
	for _, f := range s.files {
		if f.Name == name {
			return f
		}
	}
	return nil
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.log = append(s.log, Request{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery,
		Range: r.Header.Get("Range"), Authorization: r.Header.Get("Authorization")})
	token := s.Token
	s.mu.Unlock()
	path := r.URL.EscapedPath()
	if strings.HasPrefix(path, "/cdn/") {
		s.serveCDN(w, r, strings.TrimPrefix(path, "/cdn/"))
		return
	}
	if token != "" && r.Header.Get("Authorization") != "Bearer "+token {
		hubError(w, http.StatusUnauthorized, "", "Invalid credentials in Authorization header")
		return
	}
	if rest, ok := strings.CutPrefix(path, "/api/models/"); ok {
		s.serveInfo(w, r, rest)
		return
	}
	s.serveResolve(w, r, strings.TrimPrefix(path, "/"))
}

func hubError(w http.ResponseWriter, code int, errCode, msg string) {
	if errCode != "" {
		w.Header().Set("X-Error-Code", errCode)
	}
	w.Header().Set("X-Error-Message", msg)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// checkRev maps a revision to the commit, or answers 404.
func (s *Server) checkRev(w http.ResponseWriter, rev string) bool {
	if rev == "main" || rev == s.Commit {
		return true
	}
	hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
	return false
}

// serveInfo answers {repo}/revision/{rev}.
func (s *Server) serveInfo(w http.ResponseWriter, r *http.Request, rest string) {
	repo, rev, ok := strings.Cut(rest, "/revision/")
	if !ok || repo != s.Repo {
		hubError(w, http.StatusNotFound, "RepoNotFound", "Repository not found")
		return
	}
	rev, err := url.PathUnescape(rev)
	if err != nil || !s.checkRev(w, rev) {
		return
	}
	s.mu.Lock()
	blobs := r.URL.Query().Get("blobs") == "true" && !s.NoBlobs
	s.mu.Unlock()
	type lfs struct {
		SHA256      string `json:"sha256"`
		Size        int    `json:"size"`
		PointerSize int    `json:"pointerSize"`
	}
	type sibling struct {
		RFilename string `json:"rfilename"`
		BlobID    string `json:"blobId,omitempty"`
		Size      *int   `json:"size,omitempty"`
		LFS       *lfs   `json:"lfs,omitempty"`
	}
	var sib []sibling
	for _, f := range s.Files() {
		e := sibling{RFilename: f.Name}
		if blobs {
			n := len(f.Data)
			e.BlobID, e.Size = f.BlobID, &n
			if f.LFS {
				e.LFS = &lfs{SHA256: f.SHA256, Size: n, PointerSize: len(lfsPointer(f))}
			}
		}
		sib = append(sib, e)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"id": s.Repo, "modelId": s.Repo, "sha": s.Commit, "private": false, "siblings": sib})
}

// serveResolve answers {repo}/resolve/{rev}/{file}.
func (s *Server) serveResolve(w http.ResponseWriter, r *http.Request, path string) {
	repoEnd := strings.Index(path, "/resolve/")
	if repoEnd < 0 || path[:repoEnd] != s.Repo {
		hubError(w, http.StatusNotFound, "RepoNotFound", "Repository not found")
		return
	}
	rev, name, _ := strings.Cut(path[repoEnd+len("/resolve/"):], "/")
	rev, err1 := url.PathUnescape(rev)
	name, err2 := url.PathUnescape(name)
	if err1 != nil || err2 != nil || !s.checkRev(w, rev) {
		return
	}
	f := s.file(name)
	if f == nil {
		hubError(w, http.StatusNotFound, "EntryNotFound", name+" does not exist on \""+rev+"\"")
		return
	}
	w.Header().Set("X-Repo-Commit", s.Commit)
	if f.LFS {
		w.Header().Set("ETag", `"`+f.BlobID+`"`)
		w.Header().Set("X-Linked-Etag", `"`+f.SHA256+`"`)
		w.Header().Set("X-Linked-Size", strconv.Itoa(len(f.Data)))
		w.Header().Set("Location", s.CDN.URL+"/cdn/"+f.SHA256)
		w.WriteHeader(http.StatusFound)
		return
	}
	w.Header().Set("ETag", `"`+f.BlobID+`"`)
	s.serveContent(w, r, f)
}

func (s *Server) serveCDN(w http.ResponseWriter, r *http.Request, sha string) {
	for _, f := range s.Files() {
		if f.LFS && f.SHA256 == sha {
			s.serveContent(w, r, f)
			return
		}
	}
	http.NotFound(w, r)
}

// serveContent sends f's bytes, honouring "Range: bytes=N-" and the faults.
func (s *Server) serveContent(w http.ResponseWriter, r *http.Request, f *File) {
	s.mu.Lock()
	data := f.Data
	if s.Corrupt[f.Name] {
		data = append([]byte(nil), data...)
		data[0] ^= 0xff
	}
	cut, hasCut := s.CutAfter[f.Name]
	if hasCut && r.Method == http.MethodGet {
		delete(s.CutAfter, f.Name)
	}
	stall, hasStall := s.StallAfter[f.Name]
	ignoreRange := s.IgnoreRange
	s.mu.Unlock()

	start := 0
	status := http.StatusOK
	if rg := r.Header.Get("Range"); rg != "" && !ignoreRange {
		n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(rg, "bytes="), "-"))
		if err != nil || !strings.HasPrefix(rg, "bytes=") || !strings.HasSuffix(rg, "-") || n < 0 || n >= len(data) {
			w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", len(data)))
			w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			return
		}
		start, status = n, http.StatusPartialContent
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", n, len(data)-1, len(data)))
	}
	body := data[start:]
	w.Header().Set("Accept-Ranges", "bytes")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return
	}
	limit := int64(len(body))
	if hasCut {
		limit = min(limit, cut)
	}
	if hasStall {
		limit = min(limit, stall)
	}
	_, _ = w.Write(body[:limit])
	if limit == int64(len(body)) {
		return
	}
	if fl, ok := w.(http.Flusher); ok {
		fl.Flush()
	}
	if hasStall && !hasCut {
		<-r.Context().Done()
	}
	panic(http.ErrAbortHandler) // drop the connection mid-body
}
