package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/chat"
	"github.com/flextensor-go/flextensor/models/generate"
	"github.com/flextensor-go/flextensor/models/tokenizer"
)

// Usage is a response's token counts.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// ChatMessage is a chat response's message.
type ChatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ChatChoice is a chat response's choice.
type ChatChoice struct {
	Index        int         `json:"index"`
	Message      ChatMessage `json:"message"`
	Logprobs     *struct{}   `json:"logprobs"`
	FinishReason string      `json:"finish_reason"`
}

// ChatCompletion is the /v1/chat/completions response.
type ChatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"` // chat.completion
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []ChatChoice `json:"choices"`
	Usage   Usage        `json:"usage"`
}

// TextChoice is a completions response's choice.
type TextChoice struct {
	Index        int       `json:"index"`
	Text         string    `json:"text"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

// TextCompletion is the /v1/completions response, and its stream chunks.
type TextCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"` // text_completion
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []TextChoice `json:"choices"`
	Usage   *Usage       `json:"usage,omitempty"`
}

// ChunkDelta is a chat stream chunk's delta.
type ChunkDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

// ChunkChoice is a chat stream chunk's choice.
type ChunkChoice struct {
	Index        int        `json:"index"`
	Delta        ChunkDelta `json:"delta"`
	Logprobs     *struct{}  `json:"logprobs"`
	FinishReason *string    `json:"finish_reason"`
}

// ChatChunk is a chat.completion.chunk. Usage is present (null but for
// the last chunk) when the request asked for it.
type ChatChunk struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []ChunkChoice `json:"choices"`
	Usage   *Usage        `json:"usage,omitempty"`
}

// job is one generation request being served.
type job struct {
	req     *GenRequest
	prompt  []int32
	maxNew  int
	id      string
	created int64
	start   time.Time

	mu    sync.Mutex
	ids   []int32
	first time.Time
	last  time.Time
	ready chan struct{}
	m     *metrics
}

// onToken runs on the engine goroutine: it queues the id for the handler
// and records the latencies.
func (j *job) onToken(id int32) {
	now := time.Now()
	j.mu.Lock()
	j.ids = append(j.ids, id)
	prev := j.last
	j.last = now
	if j.first.IsZero() {
		j.first = now
	}
	j.mu.Unlock()
	j.m.token(now, prev, j.start)
	select {
	case j.ready <- struct{}{}:
	default:
	}
}

// take moves the queued ids into dst.
func (j *job) take(dst []int32) []int32 {
	j.mu.Lock()
	defer j.mu.Unlock()
	dst = append(dst[:0], j.ids...)
	j.ids = j.ids[:0]
	return dst
}

func (j *job) ttft() time.Duration {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.first.IsZero() {
		return 0
	}
	return j.first.Sub(j.start)
}

// generateHandler serves both generation endpoints.
func (s *Server) generateHandler(w http.ResponseWriter, r *http.Request, isChat bool) {
	info := infoOf(r)
	fail := func(e *APIError) {
		info.err = e.Message
		writeError(w, e)
	}
	if s.draining.Load() {
		fail(&APIError{Status: 503, Type: "server_error", Code: "shutting_down", Message: "the server is shutting down"})
		return
	}
	s.inflight.Add(1)
	defer s.inflight.Done()
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opt.MaxRequestBytes))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			fail(&APIError{Status: 413, Type: "invalid_request_error", Code: "request_too_large",
				Message: fmt.Sprintf("the request body is over the limit of %d bytes", s.opt.MaxRequestBytes)})
			return
		}
		fail(badRequest("", "invalid_body", "reading the request body: %v", err))
		return
	}
	req, err := DecodeRequest(body, isChat)
	if err != nil {
		fail(err.(*APIError))
		return
	}
	if req.Model != "" && req.Model != s.opt.ModelName {
		fail(s.unknownModel(req.Model))
		return
	}
	j, apiErr := s.prepare(req)
	if apiErr != nil {
		fail(apiErr)
		return
	}
	info.id, info.stream, info.promptTokens = j.id, req.Stream, len(j.prompt)
	seed := rand.Uint64()
	if req.Seed != nil {
		seed = *req.Seed
	}
	h, err := s.sched.Submit(generate.Request{
		Prompt:       j.prompt,
		MaxNewTokens: j.maxNew,
		Sampling:     kernels.SampleParams{Temperature: req.Temperature, TopP: req.TopP},
		Seed:         seed,
		StopTokens:   s.opt.StopTokens,
		OnToken:      j.onToken,
	})
	if err != nil {
		switch {
		case errors.Is(err, generate.ErrQueueFull):
			w.Header().Set("Retry-After", strconv.Itoa(max(1, int(s.opt.RetryAfter.Round(time.Second).Seconds()))))
			fail(&APIError{Status: 429, Type: "rate_limit_error", Code: "queue_full",
				Message: fmt.Sprintf("the server is busy: %d requests run and the wait queue is full; retry later", s.sched.Running())})
		case errors.Is(err, generate.ErrSchedulerClosed):
			fail(&APIError{Status: 503, Type: "server_error", Code: "shutting_down", Message: "the server is shutting down"})
		case errors.Is(err, generate.ErrCacheTooSmall):
			fail(badRequest(promptParam(req), "context_length_exceeded", "%v (give a larger --kv-cache)", err))
		case errors.Is(err, generate.ErrTooLong):
			fail(badRequest(promptParam(req), "context_length_exceeded", "%v", err))
		case errors.Is(err, generate.ErrBadRequest):
			fail(badRequest(promptParam(req), "invalid_value", "%v", err))
		default:
			fail(&APIError{Status: 500, Type: "server_error", Message: err.Error()})
		}
		return
	}
	s.notify()
	s.metrics.requestStarted()
	defer s.metrics.requestEnded()
	if req.Stream {
		s.stream(w, r, j, h, info)
	} else {
		s.complete(w, r, j, h, info)
	}
	info.ttft = j.ttft()
}

func promptParam(req *GenRequest) string {
	if req.Chat {
		return "messages"
	}
	return "prompt"
}

// prepare tokenizes the request's prompt and checks it against the
// context.
func (s *Server) prepare(req *GenRequest) (*job, *APIError) {
	j := &job{req: req, created: time.Now().Unix(), start: time.Now(), ready: make(chan struct{}, 1), m: s.metrics}
	if req.Chat {
		j.id = newID("chatcmpl-")
		if s.opt.Template == nil {
			return nil, badRequest("messages", "no_chat_template", "the served checkpoint has no chat_template (in tokenizer_config.json) and no built-in chat format fits its tokenizer, so chat messages cannot be rendered; use /v1/completions with a plain prompt")
		}
		s.tmplMu.Lock()
		text, err := s.opt.Template.Render(req.Messages, chat.Options{AddGenerationPrompt: true})
		s.tmplMu.Unlock()
		if err != nil {
			return nil, badRequest("messages", "invalid_value", "the chat template refused the messages: %v", err)
		}
		ids, err := s.opt.Tokenizer.Encode(text, false)
		if err != nil {
			return nil, badRequest("messages", "invalid_value", "tokenizing the messages: %v", err)
		}
		j.prompt = toInt32(ids)
	} else {
		j.id = newID("cmpl-")
		if req.PromptIsIDs {
			j.prompt = req.PromptIDs
			for i, id := range j.prompt {
				if int(id) >= s.model.Cfg.VocabSize {
					return nil, badRequest(fmt.Sprintf("%s[%d]", req.idsParam, i), "invalid_value", "token id %d is outside the vocabulary of %d", id, s.model.Cfg.VocabSize)
				}
			}
		} else {
			ids, err := s.opt.Tokenizer.Encode(req.Prompt, !s.opt.SkipBOS)
			if err != nil {
				return nil, badRequest("prompt", "invalid_value", "tokenizing the prompt: %v", err)
			}
			j.prompt = toInt32(ids)
		}
	}
	param := promptParam(req)
	if len(j.prompt) == 0 {
		return nil, badRequest(param, "invalid_value", "the prompt is empty (no tokens)")
	}
	if len(j.prompt) >= s.maxContext {
		return nil, badRequest(param, "context_length_exceeded",
			"the prompt is %d tokens; the model's context is %d, leaving no room for a completion", len(j.prompt), s.maxContext)
	}
	room := s.maxContext - len(j.prompt)
	if req.MaxTokens == 0 {
		// Without max_tokens: the server's default, capped by the context
		// and by what the whole KV cache holds for one request of this
		// prompt (the scheduler's rule), so that leaving max_tokens out is
		// never by itself a 400.
		j.maxNew = min(s.opt.DefaultMaxTokens, room, s.sched.MaxNewFor(len(j.prompt)))
		if j.maxNew < 1 {
			return nil, badRequest(param, "context_length_exceeded",
				"the prompt is %d tokens; the KV cache holds %d positions in all, leaving no room for a completion (give a larger --kv-cache)",
				len(j.prompt), s.cache.TotalBlocks()*s.cache.BlockSize())
		}
	}
	if req.MaxTokens > 0 {
		if req.MaxTokens > room {
			name := "max_tokens"
			return nil, badRequest(name, "context_length_exceeded",
				"max_tokens %d plus the prompt's %d tokens exceed the model's context of %d (at most %d new tokens fit)", req.MaxTokens, len(j.prompt), s.maxContext, room)
		}
		j.maxNew = req.MaxTokens
	}
	return j, nil
}

func toInt32(ids []int) []int32 {
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}

// assembler turns generated ids into text, ending at a stop string (which
// is not included) and holding back text that may begin one.
type assembler struct {
	dec     *tokenizer.StreamDecoder
	stops   []string
	pending string
	stopped bool // a stop string was met
	used    int  // ids fed before the stop
}

func newAssembler(tok *tokenizer.Tokenizer, stops []string) *assembler {
	return &assembler{dec: tok.NewStreamDecoder(), stops: stops}
}

// add feeds one id and returns the text that may be shown now.
func (a *assembler) add(id int32) string {
	if a.stopped {
		return ""
	}
	a.used++
	piece, err := a.dec.Add(int(id))
	if err != nil {
		piece = "\uFFFD" // an id the tokenizer lacks (a random-weight model may pick one)
	}
	return a.push(piece, false)
}

// finish returns the text held back at the end.
func (a *assembler) finish() string {
	if a.stopped {
		return ""
	}
	return a.push(a.dec.Flush(), true)
}

func (a *assembler) push(piece string, final bool) string {
	a.pending += piece
	if len(a.stops) == 0 {
		out := a.pending
		a.pending = ""
		return out
	}
	at := -1
	for _, st := range a.stops {
		if i := strings.Index(a.pending, st); i >= 0 && (at < 0 || i < at) {
			at = i
		}
	}
	if at >= 0 {
		out := a.pending[:at]
		a.pending, a.stopped = "", true
		return out
	}
	hold := 0
	if !final {
		for _, st := range a.stops {
			for k := min(len(st)-1, len(a.pending)); k > hold; k-- {
				if strings.HasSuffix(a.pending, st[:k]) {
					hold = k
					break
				}
			}
		}
	}
	out := a.pending[:len(a.pending)-hold]
	a.pending = a.pending[len(a.pending)-hold:]
	return out
}

// outcome is how a served generation ended.
type outcome struct {
	finish    string // stop or length; "" when it failed
	err       *APIError
	gone      bool // the client went away
	generated int
}

// follow feeds the job's tokens to emit (text per token) until the
// request finishes, a stop string ends it, or the client goes away.
func (s *Server) follow(r *http.Request, j *job, h *generate.Handle, emit func(text string) error) outcome {
	a := newAssembler(s.opt.Tokenizer, j.req.Stop)
	var buf []int32
	drain := func() error {
		buf = j.take(buf)
		for _, id := range buf {
			if text := a.add(id); text != "" {
				if err := emit(text); err != nil {
					return err
				}
			}
			if a.stopped {
				return nil
			}
		}
		return nil
	}
	cancel := func() {
		h.Cancel()
		s.notify()
		<-h.Done()
	}
	for {
		select {
		case <-j.ready:
			if err := drain(); err != nil {
				cancel()
				return outcome{gone: true}
			}
			if a.stopped {
				cancel()
				return outcome{finish: "stop", generated: a.used}
			}
		case <-h.Done():
			if err := drain(); err != nil {
				return outcome{gone: true}
			}
			res := h.Wait()
			if a.stopped {
				return outcome{finish: "stop", generated: a.used}
			}
			if text := a.finish(); text != "" {
				if err := emit(text); err != nil {
					return outcome{gone: true}
				}
			}
			o := outcome{generated: len(res.Generated)}
			switch res.Finish {
			case generate.FinishStop:
				o.finish = "stop"
			case generate.FinishLength:
				o.finish = "length"
			case generate.FinishCancelled:
				o.err = &APIError{Status: 503, Type: "server_error", Code: "cancelled", Message: "the request was cancelled: the server is shutting down"}
			default:
				msg := "generation failed"
				if res.Err != nil {
					msg = "generation failed: " + res.Err.Error()
				}
				o.err = &APIError{Status: 500, Type: "server_error", Code: "generation_failed", Message: msg}
			}
			return o
		case <-r.Context().Done():
			cancel()
			return outcome{gone: true}
		}
	}
}

// complete answers a request that is not streamed.
func (s *Server) complete(w http.ResponseWriter, r *http.Request, j *job, h *generate.Handle, info *requestInfo) {
	var text strings.Builder
	o := s.follow(r, j, h, func(t string) error { text.WriteString(t); return nil })
	info.completionTokens = o.generated
	switch {
	case o.gone:
		info.finish, info.err = "cancelled", "the client went away"
		return
	case o.err != nil:
		info.finish, info.err = "error", o.err.Message
		writeError(w, o.err)
		return
	}
	info.finish = o.finish
	usage := Usage{PromptTokens: len(j.prompt), CompletionTokens: o.generated, TotalTokens: len(j.prompt) + o.generated}
	if j.req.Chat {
		writeJSON(w, http.StatusOK, ChatCompletion{ID: j.id, Object: "chat.completion", Created: j.created, Model: s.opt.ModelName,
			Choices: []ChatChoice{{Message: ChatMessage{Role: "assistant", Content: text.String()}, FinishReason: o.finish}}, Usage: usage})
		return
	}
	writeJSON(w, http.StatusOK, TextCompletion{ID: j.id, Object: "text_completion", Created: j.created, Model: s.opt.ModelName,
		Choices: []TextChoice{{Text: text.String(), FinishReason: &o.finish}}, Usage: &usage})
}

// stream answers a request as server-sent events.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, j *job, h *generate.Handle, info *requestInfo) {
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-cache")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send := func(v any) error {
		data, err := marshal(v)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", data); err != nil {
			return err
		}
		return rc.Flush()
	}
	chatChunk := func(d ChunkDelta, finish *string) ChatChunk {
		c := ChatChunk{ID: j.id, Object: "chat.completion.chunk", Created: j.created, Model: s.opt.ModelName,
			Choices: []ChunkChoice{{Delta: d, FinishReason: finish}}}
		return c
	}
	textChunk := func(text string, finish *string) TextCompletion {
		return TextCompletion{ID: j.id, Object: "text_completion", Created: j.created, Model: s.opt.ModelName,
			Choices: []TextChoice{{Text: text, FinishReason: finish}}}
	}
	// With include_usage every chunk carries "usage": null, the last one
	// the counts (as OpenAI): encode through a wrapper that keeps the null.
	wrap := func(v any) any {
		if !j.req.IncludeUsage {
			return v
		}
		return withNullUsage{v}
	}
	if j.req.Chat {
		empty := ""
		if err := send(wrap(chatChunk(ChunkDelta{Role: "assistant", Content: &empty}, nil))); err != nil {
			h.Cancel()
			s.notify()
			<-h.Done()
			info.finish, info.err = "cancelled", "the client went away"
			return
		}
	}
	o := s.follow(r, j, h, func(t string) error {
		if j.req.Chat {
			return send(wrap(chatChunk(ChunkDelta{Content: &t}, nil)))
		}
		return send(wrap(textChunk(t, nil)))
	})
	info.completionTokens = o.generated
	switch {
	case o.gone:
		info.finish, info.err = "cancelled", "the client went away"
		return
	case o.err != nil:
		info.finish, info.err = "error", o.err.Message
		send(o.err) // {"error": {...}} as an event, then the end
		fmt.Fprint(w, "data: [DONE]\n\n")
		rc.Flush()
		return
	}
	info.finish = o.finish
	finish := o.finish
	var err error
	if j.req.Chat {
		err = send(wrap(chatChunk(ChunkDelta{}, &finish)))
	} else {
		err = send(wrap(textChunk("", &finish)))
	}
	if err == nil && j.req.IncludeUsage {
		u := &Usage{PromptTokens: len(j.prompt), CompletionTokens: o.generated, TotalTokens: len(j.prompt) + o.generated}
		if j.req.Chat {
			err = send(ChatChunk{ID: j.id, Object: "chat.completion.chunk", Created: j.created, Model: s.opt.ModelName, Choices: []ChunkChoice{}, Usage: u})
		} else {
			err = send(TextCompletion{ID: j.id, Object: "text_completion", Created: j.created, Model: s.opt.ModelName, Choices: []TextChoice{}, Usage: u})
		}
	}
	if err == nil {
		fmt.Fprint(w, "data: [DONE]\n\n")
		rc.Flush()
	}
}

// withNullUsage encodes a chunk with "usage": null added.
type withNullUsage struct{ v any }

func (w withNullUsage) MarshalJSON() ([]byte, error) {
	data, err := marshal(w.v)
	if err != nil || len(data) < 2 || data[len(data)-1] != '}' {
		return data, err
	}
	return append(data[:len(data)-1], []byte(`,"usage":null}`)...), nil
}

// marshal encodes v as JSON without HTML escaping ("<" stays "<").
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

// writeJSON writes v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := marshal(v)
	if err != nil {
		status, data = 500, []byte(`{"error":{"message":"encoding the response failed","type":"server_error","param":null,"code":null}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(data, '\n'))
}

// writeError writes an API error with its status.
func writeError(w http.ResponseWriter, e *APIError) { writeJSON(w, e.Status, e) }
