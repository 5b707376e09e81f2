// Package serve is an OpenAI-compatible HTTP server over the batched
// scheduler (package generate): POST /v1/chat/completions and
// /v1/completions (streamed as server-sent events or not), GET /v1/models,
// /health, Prometheus /metrics and a small chat page at /.
//
// Every request becomes one generate.Request; the scheduler runs all of
// them together, one batched forward per step, so concurrent requests share
// each pass over the weights (what makes an offloaded model serve many
// users at a useful rate). Requests join the running batch between steps,
// long prompts are prefilled in chunks between other requests' decode
// steps, and a request that finds the KV cache full waits in the
// scheduler's bounded queue; beyond the queue the server answers 429 with
// Retry-After. A client that goes away has its sequence cancelled; the
// scheduler frees its KV blocks at the next step.
//
// Use:
//
//	srv, err := serve.New(sess.Model, sess.Backend, cache, generate.Options{...}, serve.Options{Tokenizer: tok, Template: tmpl})
//	...
//	err = srv.ListenAndServe(ctx, "127.0.0.1:8080") // returns when ctx ends and in-flight requests drained
package serve

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/chat"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/models/generate"
	"github.com/flextensor-go/flextensor/models/kvcache"
	"github.com/flextensor-go/flextensor/models/tokenizer"
)

// Options configure a Server beyond its scheduler.
type Options struct {
	// ModelName is the model id /v1/models lists and responses carry; a
	// request naming another model is a 404. "" : "default".
	ModelName string
	// Tokenizer turns text into ids and back; required.
	Tokenizer *tokenizer.Tokenizer
	// Template renders chat messages; nil makes /v1/chat/completions a
	// 400 that says the checkpoint has no chat format.
	Template *chat.Template
	// StopTokens end a generation besides the model's EOS (the chat
	// template's end tokens).
	StopTokens []int32
	// SkipBOS leaves out the tokenizer's special tokens (BOS), which are
	// otherwise added to completions prompts given as text (as
	// transformers' tokenizers do by default).
	SkipBOS bool
	// APIKey, when set, is required as "Authorization: Bearer KEY" on
	// /v1/ requests (compared in constant time).
	APIKey string
	// DefaultMaxTokens is the completion limit of a request that gives no
	// max_tokens (nor max_completion_tokens); 0: DefaultMaxTokens. It is
	// capped by the context's room and by what the KV cache holds for one
	// sequence, so leaving max_tokens out never makes a request too long.
	// (The scheduler takes a request's KV blocks as it grows, not for this
	// whole limit at admission; a large default costs no concurrency.)
	DefaultMaxTokens int
	// MaxRequestBytes caps a request body; 0: 4 MiB.
	MaxRequestBytes int64
	// RetryAfter is the Retry-After of a 429; 0: 1 s.
	RetryAfter time.Duration
	// Logger receives a structured line per request; nil: none.
	Logger *slog.Logger
	// ReadHeaderTimeout and ReadTimeout bound reading a request (headers,
	// then the whole request); 0: 10 s and 60 s. IdleTimeout closes idle
	// keep-alive connections; 0: 120 s.
	ReadHeaderTimeout, ReadTimeout, IdleTimeout time.Duration
	// DrainTimeout is how long ListenAndServe waits for in-flight requests
	// after its context ends before cancelling them; 0: 30 s.
	DrainTimeout time.Duration
	// OffloadStats, when set, is called on the scheduling goroutine between
	// steps (at most once a second, and after the last step before the
	// engine idles) and returns the offload transfer and wait time and the
	// passes measured since the last call; /metrics has the
	// flextensor_offload_* counters only when it is set.
	OffloadStats func() (transfer, wait time.Duration, passes int)
	// Failed, when set, reports an error that leaves the model unable to
	// run (an offload engine that failed); /health then answers 503 with
	// it as the reason.
	Failed func() error
}

// DefaultMaxTokens is Options.DefaultMaxTokens when left 0: the completion
// limit of a request without max_tokens.
const DefaultMaxTokens = 1024

// Server serves one model through one scheduler.
type Server struct {
	opt        Options
	model      *decoder.Model
	cache      *kvcache.Paged
	sched      *generate.Scheduler
	maxContext int
	created    int64
	keyHash    [32]byte
	tmplMu     sync.Mutex // chat templates are rendered one at a time
	metrics    *metrics
	handler    http.Handler

	wake     chan struct{} // a request arrived or was cancelled
	engineMu sync.Mutex    // one engine loop
	draining atomic.Bool
	inflight sync.WaitGroup // generation requests being served
	stepErrs atomic.Int64
}

// New makes a server for model m on backend b over the paged KV cache
// (m.NewPagedCache), with a scheduler of sched's options. The caller runs
// the engine with Run (ListenAndServe does), and closes the cache after.
func New(m *decoder.Model, b kernels.Backend, cache *kvcache.Paged, sched generate.Options, opt Options) (*Server, error) {
	if opt.Tokenizer == nil {
		return nil, errors.New("serve.New: a tokenizer is needed")
	}
	if opt.ModelName == "" {
		opt.ModelName = "default"
	}
	if opt.MaxRequestBytes == 0 {
		opt.MaxRequestBytes = 4 << 20
	}
	if opt.DefaultMaxTokens == 0 {
		opt.DefaultMaxTokens = DefaultMaxTokens
	}
	if opt.DefaultMaxTokens < 0 {
		return nil, fmt.Errorf("serve.New: DefaultMaxTokens %d is negative", opt.DefaultMaxTokens)
	}
	if opt.MaxRequestBytes < 0 {
		return nil, fmt.Errorf("serve.New: MaxRequestBytes %d is negative", opt.MaxRequestBytes)
	}
	if opt.RetryAfter <= 0 {
		opt.RetryAfter = time.Second
	}
	if opt.ReadHeaderTimeout == 0 {
		opt.ReadHeaderTimeout = 10 * time.Second
	}
	if opt.ReadTimeout == 0 {
		opt.ReadTimeout = 60 * time.Second
	}
	if opt.IdleTimeout == 0 {
		opt.IdleTimeout = 120 * time.Second
	}
	if opt.DrainTimeout == 0 {
		opt.DrainTimeout = 30 * time.Second
	}
	s, err := generate.New(m, b, cache, sched)
	if err != nil {
		return nil, err
	}
	maxContext := sched.MaxContext
	if maxContext == 0 {
		maxContext = m.Cfg.MaxPositionEmbeddings
	}
	srv := &Server{opt: opt, model: m, cache: cache, sched: s, maxContext: maxContext,
		created: time.Now().Unix(), wake: make(chan struct{}, 1)}
	if opt.APIKey != "" {
		srv.keyHash = sha256.Sum256([]byte(opt.APIKey))
	}
	srv.metrics = newMetrics(srv)
	srv.handler = srv.routes()
	return srv, nil
}

// Handler is the server's HTTP handler (for tests and embedding); the
// engine must run (Run) for generation requests to finish.
func (s *Server) Handler() http.Handler { return s.handler }

// Scheduler is the server's scheduler (for its counters).
func (s *Server) Scheduler() *generate.Scheduler { return s.sched }

// KVBlocksInUse is the number of KV cache blocks sequences hold.
func (s *Server) KVBlocksInUse() int { return s.cache.TotalBlocks() - s.cache.FreeBlocks() }

// notify wakes the engine loop.
func (s *Server) notify() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Run is the engine: it steps the scheduler while requests run or wait
// and sleeps while none do, until ctx ends; then it cancels every request
// left and returns. One Run at a time. After Close it returns at once.
func (s *Server) Run(ctx context.Context) {
	s.engineMu.Lock()
	defer s.engineMu.Unlock()
	lastOffload := time.Now()
	for {
		if ctx.Err() != nil {
			s.sched.CancelAll()
			s.sched.Step() // retires them
			return
		}
		start := time.Now()
		more, err := s.sched.Step()
		if errors.Is(err, generate.ErrSchedulerClosed) {
			return // Close ran: nothing is left to step
		}
		s.metrics.stepDone(time.Since(start))
		if err != nil {
			// The requests in the failed forward ended with FinishError
			// (their handlers answer 500); the others go on.
			s.stepErrs.Add(1)
			if s.opt.Logger != nil {
				s.opt.Logger.Error("forward failed", "err", err.Error())
			}
		}
		// At most once a second while busy, and after the last step before
		// idling, so that every pass is counted.
		if s.opt.OffloadStats != nil && (time.Since(lastOffload) >= time.Second || !more) {
			lastOffload = time.Now()
			tr, wait, passes := s.opt.OffloadStats()
			s.metrics.offload(tr, wait, passes)
		}
		if !more {
			s.metrics.idle()
			select {
			case <-s.wake:
			case <-ctx.Done():
			}
		}
	}
}

// ListenAndServe listens on addr and serves until ctx ends; then it stops
// accepting, lets in-flight requests finish (up to DrainTimeout, after
// which they are cancelled), and returns. It runs the engine itself.
func (s *Server) ListenAndServe(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return s.Serve(ctx, ln, nil)
}

// Serve is ListenAndServe on a listener; ready, when set, is called once
// the server accepts connections.
func (s *Server) Serve(ctx context.Context, ln net.Listener, ready func(addr net.Addr)) error {
	engineCtx, stopEngine := context.WithCancel(context.Background())
	engineDone := make(chan struct{})
	go func() {
		s.Run(engineCtx)
		close(engineDone)
	}()
	defer func() {
		stopEngine()
		<-engineDone
	}()
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: s.opt.ReadHeaderTimeout,
		ReadTimeout:       s.opt.ReadTimeout,
		IdleTimeout:       s.opt.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          nil,
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	if ready != nil {
		ready(ln.Addr())
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.draining.Store(true)
	if s.opt.Logger != nil {
		s.opt.Logger.Info("draining", "in_flight", s.sched.Running()+s.sched.Waiting(), "timeout", s.opt.DrainTimeout.String())
	}
	drainCtx, cancel := context.WithTimeout(context.Background(), s.opt.DrainTimeout)
	defer cancel()
	err := hs.Shutdown(drainCtx)
	if err != nil {
		// Past the drain timeout: cancel what is left, give the handlers
		// cancelGrace to answer (a stream's last event names the
		// cancellation, then data: [DONE]), then close what still hangs.
		s.sched.CancelAll()
		s.notify()
		graceCtx, cancelGraceCtx := context.WithTimeout(context.Background(), cancelGrace)
		if hs.Shutdown(graceCtx) != nil {
			hs.Close()
		}
		cancelGraceCtx()
	}
	s.inflight.Wait()
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: requests still running after %v were cancelled", ErrDrainTimeout, s.opt.DrainTimeout)
	}
	return nil
}

// Close frees what the scheduler holds on the device beside the paged
// cache (generate.Scheduler.Close: solo mode's contiguous cache and
// captured step), cancelling any request still in it. Call it once Serve
// or Run has returned and before closing the cache; requests that arrive
// later are answered 503. Calling it again does nothing.
func (s *Server) Close() error {
	err := s.sched.Close()
	s.notify() // an engine still sleeping wakes and returns
	return err
}

// ErrDrainTimeout is (wrapped in) Serve's error when requests were still
// running DrainTimeout after its context ended and were cancelled; their
// clients got a cancellation answer (a stream: an error event, then
// data: [DONE]).
var ErrDrainTimeout = errors.New("drain timeout")

// cancelGrace is how long the handlers of requests cancelled at the drain
// timeout get to write their last answer before the connections close.
const cancelGrace = time.Second

// routes is the server's handler: authentication for /v1/ (before a path
// or method is checked), the routes, the request log and metrics around
// them.
func (s *Server) routes() http.Handler {
	type route struct {
		method string
		h      http.HandlerFunc
	}
	table := map[string]route{
		"/v1/chat/completions": {http.MethodPost, func(w http.ResponseWriter, r *http.Request) { s.generateHandler(w, r, true) }},
		"/v1/completions":      {http.MethodPost, func(w http.ResponseWriter, r *http.Request) { s.generateHandler(w, r, false) }},
		"/v1/models":           {http.MethodGet, s.modelsHandler},
		"/health":              {http.MethodGet, s.healthHandler},
		"/metrics":             {http.MethodGet, s.metrics.handler.ServeHTTP},
		"/":                    {http.MethodGet, pageHandler},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		info := &requestInfo{}
		rw := &statusWriter{ResponseWriter: w}
		r = r.WithContext(context.WithValue(r.Context(), infoKey{}, info))
		path := r.URL.Path
		rt, ok := table[path]
		if !ok && strings.HasPrefix(path, "/v1/models/") {
			rt, ok = route{http.MethodGet, s.modelsHandler}, true
		}
		label := path
		switch {
		case strings.HasPrefix(path, "/v1/") && !s.authorized(r):
			// Before the route and method checks, so that without the key
			// nothing about /v1/ shows.
			if !ok {
				label = "other"
			}
			rw.Header().Set("WWW-Authenticate", `Bearer realm="flextensor"`)
			writeError(rw, &APIError{Status: 401, Type: "invalid_request_error", Code: "invalid_api_key", Message: "missing or incorrect API key: send Authorization: Bearer <key>"})
		case !ok:
			label = "other"
			writeError(rw, &APIError{Status: 404, Type: "invalid_request_error", Code: "not_found", Message: fmt.Sprintf("no route %s %s; the API is under /v1/ (chat/completions, completions, models)", r.Method, path)})
		case r.Method != rt.method && !(r.Method == http.MethodHead && rt.method == http.MethodGet):
			rw.Header().Set("Allow", rt.method)
			writeError(rw, &APIError{Status: 405, Type: "invalid_request_error", Code: "method_not_allowed", Message: fmt.Sprintf("%s takes %s, not %s", path, rt.method, r.Method)})
		default:
			rt.h(rw, r)
		}
		if strings.HasPrefix(label, "/v1/models/") {
			label = "/v1/models"
		}
		dur := time.Since(start)
		s.metrics.request(label, rw.code(), dur)
		if s.opt.Logger != nil && path != "/metrics" && path != "/health" {
			attrs := []any{"method", r.Method, "path", path, "status", rw.code(), "duration_ms", float64(dur.Microseconds()) / 1e3,
				"remote", r.RemoteAddr, "bytes", rw.bytes}
			if info.id != "" {
				attrs = append(attrs, "id", info.id, "stream", info.stream, "prompt_tokens", info.promptTokens,
					"completion_tokens", info.completionTokens, "finish_reason", info.finish)
				if info.ttft > 0 {
					attrs = append(attrs, "ttft_ms", float64(info.ttft.Microseconds())/1e3)
				}
			}
			if info.err != "" {
				attrs = append(attrs, "error", info.err)
			}
			s.opt.Logger.Info("request", attrs...)
		}
	})
}

// authorized checks the bearer key in constant time (of the hashes, so
// that the key's length does not show either).
func (s *Server) authorized(r *http.Request) bool {
	if s.opt.APIKey == "" {
		return true
	}
	// The scheme is case-insensitive (RFC 7235).
	scheme, key, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	h := sha256.Sum256([]byte(strings.TrimSpace(key)))
	return subtle.ConstantTimeCompare(h[:], s.keyHash[:]) == 1
}

func (s *Server) healthHandler(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "draining"})
		return
	}
	if s.opt.Failed != nil {
		if err := s.opt.Failed(); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "failed", "reason": err.Error()})
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "model": s.opt.ModelName,
		"running": s.sched.Running(), "waiting": s.sched.Waiting(), "kv_blocks_in_use": s.KVBlocksInUse(), "kv_blocks_total": s.cache.TotalBlocks()})
}

// modelEntry is a /v1/models item.
type modelEntry struct {
	ID         string `json:"id"`
	Object     string `json:"object"`
	Created    int64  `json:"created"`
	OwnedBy    string `json:"owned_by"`
	MaxContext int    `json:"max_model_len"`
}

func (s *Server) modelsHandler(w http.ResponseWriter, r *http.Request) {
	e := modelEntry{ID: s.opt.ModelName, Object: "model", Created: s.created, OwnedBy: "flextensor", MaxContext: s.maxContext}
	if id, ok := strings.CutPrefix(r.URL.Path, "/v1/models/"); ok {
		if id != s.opt.ModelName {
			writeError(w, s.unknownModel(id))
			return
		}
		writeJSON(w, http.StatusOK, e)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []modelEntry{e}})
}

func (s *Server) unknownModel(name string) *APIError {
	return &APIError{Status: 404, Type: "invalid_request_error", Param: "model", Code: "model_not_found",
		Message: fmt.Sprintf("the model %q does not exist; this server serves %q", name, s.opt.ModelName)}
}

// requestInfo collects what the request log prints of a generation.
type requestInfo struct {
	id                             string
	stream                         bool
	promptTokens, completionTokens int
	finish                         string
	ttft                           time.Duration
	err                            string
}

type infoKey struct{}

func infoOf(r *http.Request) *requestInfo {
	if i, ok := r.Context().Value(infoKey{}).(*requestInfo); ok {
		return i
	}
	return &requestInfo{}
}

// statusWriter records the status and size of a response.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the connection's Flush.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// newID is a response id: prefix and 24 random hex digits.
func newID(prefix string) string {
	var b [12]byte
	if _, err := io.ReadFull(rand.Reader, b[:]); err != nil {
		return prefix + fmt.Sprint(time.Now().UnixNano())
	}
	return prefix + hex.EncodeToString(b[:])
}
