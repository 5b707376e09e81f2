package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/flextensor-go/flextensor/models/chat"
)

// APIError is an error as the OpenAI API reports it: an HTTP status and
// {"error": {"message", "type", "param", "code"}}.
type APIError struct {
	Status  int    // the HTTP status
	Message string // what is wrong, for a person
	Type    string // invalid_request_error, authentication_error, rate_limit_error, server_error, ...
	Param   string // the request field at fault ("" when none)
	Code    string // a machine-readable code ("" when none)
}

// Error is the API error's message.
func (e *APIError) Error() string {
	if e.Param != "" {
		return fmt.Sprintf("%d %s (%s): %s", e.Status, e.Type, e.Param, e.Message)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Type, e.Message)
}

// MarshalJSON writes the error body: {"error": {...}}, param and code null
// when empty.
func (e *APIError) MarshalJSON() ([]byte, error) {
	type body struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}
	b := body{Message: e.Message, Type: e.Type}
	if e.Param != "" {
		b.Param = &e.Param
	}
	if e.Code != "" {
		b.Code = &e.Code
	}
	return json.Marshal(struct {
		Error body `json:"error"`
	}{b})
}

// badRequest is a 400 invalid_request_error about param.
func badRequest(param, code, format string, args ...any) *APIError {
	return &APIError{Status: 400, Type: "invalid_request_error", Param: param, Code: code, Message: fmt.Sprintf(format, args...)}
}

// maxStops is the most stop sequences a request may give (as OpenAI).
const maxStops = 4

// GenRequest is a decoded /v1/chat/completions or /v1/completions request:
// what the server needs of it, checked for types and ranges. Limits that
// depend on the model (the context) are checked later.
type GenRequest struct {
	Chat     bool           // /v1/chat/completions
	Model    string         // "" when not given
	Messages []chat.Message // chat: the conversation, content parts flattened to text
	Prompt   string         // completions: a text prompt
	// PromptIDs, completions: a prompt given as token ids (PromptIsIDs).
	PromptIDs   []int32
	PromptIsIDs bool
	idsParam    string // the token id list's param: prompt, or prompt[0] when nested
	MaxTokens   int    // 0: not given (Options.DefaultMaxTokens)
	Temperature float32
	TopP        float32
	Seed        *uint64 // nil: a random seed
	Stop        []string
	Stream      bool
	// IncludeUsage is stream_options.include_usage: a last chunk with the
	// usage.
	IncludeUsage bool
}

// rawRequest is the wire form; unknown fields are ignored, and fields of
// more than one type are read from raw JSON.
type rawRequest struct {
	Model               *string         `json:"model"`
	Messages            json.RawMessage `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	MaxTokens           json.RawMessage `json:"max_tokens"`
	MaxCompletionTokens json.RawMessage `json:"max_completion_tokens"`
	Temperature         json.RawMessage `json:"temperature"`
	TopP                json.RawMessage `json:"top_p"`
	Seed                json.RawMessage `json:"seed"`
	Stop                json.RawMessage `json:"stop"`
	Stream              *bool           `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage *bool `json:"include_usage"`
	} `json:"stream_options"`
	N json.RawMessage `json:"n"`
	// Fields that would change what the answer holds, which this server
	// does not do: refused rather than ignored (see unsupported).
	ResponseFormat json.RawMessage `json:"response_format"`
	Tools          json.RawMessage `json:"tools"`
	ToolChoice     json.RawMessage `json:"tool_choice"`
	Functions      json.RawMessage `json:"functions"`
	FunctionCall   json.RawMessage `json:"function_call"`
	Logprobs       json.RawMessage `json:"logprobs"`
	TopLogprobs    json.RawMessage `json:"top_logprobs"`
	Echo           json.RawMessage `json:"echo"`
}

// unsupported refuses, as a 400 "not supported: FIELD", the fields that
// change the output contract (structured output, tool calls, log
// probabilities, an echoed prompt) when they ask for anything but the
// plain behaviour: response_format other than {"type": "text"}, a
// non-empty tools or functions list, tool_choice or function_call other
// than "none" or "auto", logprobs true (or a number, the completions form),
// top_logprobs above 0, echo true.
func (raw *rawRequest) unsupported() error {
	refuse := func(field, why string) error {
		return badRequest(field, "unsupported_parameter", "not supported: %s (%s)", field, why)
	}
	if given(raw.ResponseFormat) {
		var rf struct {
			Type *string `json:"type"`
		}
		if err := json.Unmarshal(raw.ResponseFormat, &rf); err != nil || rf.Type == nil || *rf.Type != "text" {
			return refuse("response_format", "this server makes plain text; only {\"type\": \"text\"} is accepted")
		}
	}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{{"tools", raw.Tools}, {"functions", raw.Functions}} {
		if !given(f.raw) {
			continue
		}
		var list []json.RawMessage
		if err := json.Unmarshal(f.raw, &list); err != nil || len(list) > 0 {
			return refuse(f.name, "this server makes no tool calls")
		}
	}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{{"tool_choice", raw.ToolChoice}, {"function_call", raw.FunctionCall}} {
		if !given(f.raw) {
			continue
		}
		var mode string
		if err := json.Unmarshal(f.raw, &mode); err != nil || (mode != "none" && mode != "auto") {
			return refuse(f.name, "this server makes no tool calls; only \"none\" or \"auto\" is accepted")
		}
	}
	if given(raw.Logprobs) && string(bytes.TrimSpace(raw.Logprobs)) != "false" {
		return refuse("logprobs", "this server returns no log probabilities")
	}
	if given(raw.TopLogprobs) && string(bytes.TrimSpace(raw.TopLogprobs)) != "0" {
		return refuse("top_logprobs", "this server returns no log probabilities")
	}
	if given(raw.Echo) && string(bytes.TrimSpace(raw.Echo)) != "false" {
		return refuse("echo", "the prompt is not echoed")
	}
	return nil
}

// DecodeRequest reads a request body for the chat endpoint (chat true) or
// the completions endpoint. Every error is a 400 *APIError naming the field.
func DecodeRequest(body []byte, isChat bool) (*GenRequest, error) {
	if !utf8.Valid(body) {
		return nil, badRequest("", "invalid_json", "the request body is not valid UTF-8")
	}
	var raw rawRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return nil, jsonError(err)
	}
	if dec.More() {
		return nil, badRequest("", "invalid_json", "the request body holds more than one JSON value")
	}
	if err := raw.unsupported(); err != nil {
		return nil, err
	}
	r := &GenRequest{Chat: isChat, Temperature: 1, TopP: 1}
	if raw.Model != nil {
		r.Model = *raw.Model
	}
	var err error
	if isChat {
		if raw.Messages == nil || string(raw.Messages) == "null" {
			return nil, badRequest("messages", "missing_required_parameter", "messages is required: a list of {\"role\", \"content\"} objects")
		}
		if r.Messages, err = decodeMessages(raw.Messages); err != nil {
			return nil, err
		}
	} else {
		if raw.Prompt == nil || string(raw.Prompt) == "null" {
			return nil, badRequest("prompt", "missing_required_parameter", "prompt is required: a string or a list of token ids")
		}
		if err := decodePrompt(raw.Prompt, r); err != nil {
			return nil, err
		}
	}
	maxTok, maxName := raw.MaxTokens, "max_tokens"
	if given(raw.MaxCompletionTokens) {
		maxTok, maxName = raw.MaxCompletionTokens, "max_completion_tokens"
	}
	if given(maxTok) {
		n, err := intField(maxTok, maxName)
		if err != nil {
			return nil, err
		}
		if n < 1 {
			return nil, badRequest(maxName, "invalid_value", "%s is %d; it must be at least 1", maxName, n)
		}
		if n > math.MaxInt32 {
			return nil, badRequest(maxName, "invalid_value", "%s %d is beyond any context", maxName, n)
		}
		r.MaxTokens = int(n)
	}
	if given(raw.Temperature) {
		t, err := floatField(raw.Temperature, "temperature")
		if err != nil {
			return nil, err
		}
		if t < 0 || t > 2 {
			return nil, badRequest("temperature", "invalid_value", "temperature %v is outside [0, 2]", t)
		}
		r.Temperature = float32(t)
	}
	if given(raw.TopP) {
		p, err := floatField(raw.TopP, "top_p")
		if err != nil {
			return nil, err
		}
		if !(p > 0 && p <= 1) {
			return nil, badRequest("top_p", "invalid_value", "top_p %v is outside (0, 1]", p)
		}
		r.TopP = float32(p)
	}
	if given(raw.Seed) {
		n, err := intField(raw.Seed, "seed")
		if err != nil {
			return nil, err
		}
		s := uint64(n)
		r.Seed = &s
	}
	if r.Stop, err = decodeStop(raw.Stop); err != nil {
		return nil, err
	}
	if raw.Stream != nil {
		r.Stream = *raw.Stream
	}
	if raw.StreamOptions != nil && raw.StreamOptions.IncludeUsage != nil {
		if !r.Stream {
			return nil, badRequest("stream_options", "invalid_value", "stream_options applies only with stream: true")
		}
		r.IncludeUsage = *raw.StreamOptions.IncludeUsage
	}
	if given(raw.N) {
		n, err := intField(raw.N, "n")
		if err != nil {
			return nil, err
		}
		if n != 1 {
			return nil, badRequest("n", "invalid_value", "n is %d; this server makes one choice per request (n: 1)", n)
		}
	}
	return r, nil
}

// jsonError turns a decoding error into a 400 naming the field.
func jsonError(err error) *APIError {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			return badRequest("", "invalid_type", "the request body must be a JSON object, not %s", te.Value)
		}
		want := te.Type.String()
		switch {
		case strings.Contains(want, "Number"):
			want = "a number"
		case strings.Contains(want, "bool"):
			want = "a boolean"
		case strings.Contains(want, "string"):
			want = "a string"
		case strings.Contains(want, "struct"):
			want = "an object"
		}
		return badRequest(field, "invalid_type", "%s must be %s, not %s", field, want, te.Value)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return badRequest("", "invalid_json", "the request body is not valid JSON: %v (at byte %d)", err, se.Offset)
	}
	if errors.Is(err, errEOF) || err.Error() == "EOF" {
		return badRequest("", "invalid_json", "the request body is empty; send a JSON object")
	}
	return badRequest("", "invalid_json", "the request body is not valid JSON: %v", err)
}

var errEOF = errors.New("unexpected EOF")

// given reports whether a field is present and not null.
func given(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && string(raw) != "null"
}

// number reads a field that must be a JSON number.
func number(raw json.RawMessage, name string) (json.Number, error) {
	raw = bytes.TrimSpace(raw)
	if c := raw[0]; c != '-' && (c < '0' || c > '9') {
		return "", badRequest(name, "invalid_type", "%s must be a number, not %s", name, abbreviate(raw))
	}
	return json.Number(raw), nil
}

// intField reads an integer-valued number.
func intField(raw json.RawMessage, name string) (int64, error) {
	n, err := number(raw, name)
	if err != nil {
		return 0, err
	}
	v, err := n.Int64()
	if err != nil {
		f, ferr := n.Float64()
		if ferr == nil && f == math.Trunc(f) && math.Abs(f) < 1<<62 {
			return int64(f), nil
		}
		if ferr == nil && math.Abs(f) >= 1<<62 {
			return 0, badRequest(name, "invalid_value", "%s %s is out of range", name, n)
		}
		return 0, badRequest(name, "invalid_type", "%s must be an integer, not %s", name, n)
	}
	return v, nil
}

// floatField reads a finite number.
func floatField(raw json.RawMessage, name string) (float64, error) {
	n, err := number(raw, name)
	if err != nil {
		return 0, err
	}
	v, err := n.Float64()
	if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, badRequest(name, "invalid_value", "%s %s is not a finite number", name, n)
	}
	return v, nil
}

// decodeMessages reads the chat messages: a role (system, developer, read as
// system, user or assistant) and content that is a string or a list of
// text parts.
func decodeMessages(raw json.RawMessage) ([]chat.Message, error) {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, badRequest("messages", "invalid_type", "messages must be a list of {\"role\", \"content\"} objects")
	}
	if len(items) == 0 {
		return nil, badRequest("messages", "invalid_value", "messages is empty; give at least one message")
	}
	out := make([]chat.Message, 0, len(items))
	for i, item := range items {
		param := fmt.Sprintf("messages[%d]", i)
		var m struct {
			Role    json.RawMessage `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if err := json.Unmarshal(item, &m); err != nil || bytes.TrimSpace(item)[0] != '{' {
			return nil, badRequest(param, "invalid_type", "%s must be an object with a role and a content", param)
		}
		var role string
		if err := json.Unmarshal(m.Role, &role); err != nil || role == "" {
			return nil, badRequest(param+".role", "invalid_value", "%s.role must be a non-empty string (system, user or assistant)", param)
		}
		switch role {
		case "system", "user", "assistant":
		case "developer":
			role = "system" // the newer name of the system role
		case "tool", "function":
			return nil, badRequest(param+".role", "unsupported_parameter", "%s.role is %q: not supported (this server makes no tool calls)", param, role)
		default:
			return nil, badRequest(param+".role", "invalid_value", "%s.role is %q; want system, developer, user or assistant", param, role)
		}
		if !given(m.Content) {
			return nil, badRequest(param+".content", "invalid_value", "%s.content is missing or null; give a string or a list of text parts", param)
		}
		text, err := decodeContent(m.Content, param+".content")
		if err != nil {
			return nil, err
		}
		out = append(out, chat.Message{Role: role, Content: text})
	}
	return out, nil
}

// decodeContent flattens a message content: a string or a
// list of {"type": "text", "text": ...} parts joined with newlines. Other
// part types (images, audio) are refused: the models served take text.
func decodeContent(raw json.RawMessage, param string) (string, error) {
	raw = bytes.TrimSpace(raw)
	var s string
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", badRequest(param, "invalid_type", "%s is not a valid string", param)
		}
		return s, nil
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badRequest(param, "invalid_type", "%s must be a string or a list of content parts", param)
	}
	texts := make([]string, 0, len(parts))
	for j, p := range parts {
		pp := fmt.Sprintf("%s[%d]", param, j)
		var part struct {
			Type *string `json:"type"`
			Text *string `json:"text"`
		}
		if err := json.Unmarshal(p, &part); err != nil || part.Type == nil {
			return "", badRequest(pp, "invalid_type", "%s must be an object {\"type\": \"text\", \"text\": ...}", pp)
		}
		if *part.Type != "text" {
			return "", badRequest(pp+".type", "invalid_value", "%s.type is %q; only text parts are supported", pp, *part.Type)
		}
		if part.Text == nil {
			return "", badRequest(pp+".text", "invalid_type", "%s.text must be a string", pp)
		}
		texts = append(texts, *part.Text)
	}
	return strings.Join(texts, "\n"), nil
}

// decodePrompt reads a completions prompt: a string, a list of token ids,
// or a list of one prompt (a string or a list of token ids).
func decodePrompt(raw json.RawMessage, r *GenRequest) error {
	raw = bytes.TrimSpace(raw)
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &r.Prompt); err != nil {
			return badRequest("prompt", "invalid_type", "prompt is not a valid string")
		}
		return nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return badRequest("prompt", "invalid_type", "prompt must be a string or a list of token ids")
	}
	if len(list) == 0 {
		return badRequest("prompt", "invalid_value", "prompt is an empty list")
	}
	if first := bytes.TrimSpace(list[0]); len(first) > 0 && (first[0] == '"' || first[0] == '[') {
		// A list of prompts (strings or token id lists): one is served.
		if len(list) != 1 {
			return badRequest("prompt", "invalid_value", "prompt lists %d prompts; this server takes one prompt per request", len(list))
		}
		if first[0] == '[' {
			if err := json.Unmarshal(first, &list); err != nil {
				return badRequest("prompt[0]", "invalid_type", "prompt[0] must be a list of token ids")
			}
			if len(list) == 0 {
				return badRequest("prompt[0]", "invalid_value", "prompt[0] is an empty list of token ids")
			}
			return decodeIDs(list, "prompt[0]", r)
		}
		if err := json.Unmarshal(list[0], &r.Prompt); err != nil {
			return badRequest("prompt[0]", "invalid_type", "prompt[0] is not a valid string")
		}
		return nil
	}
	return decodeIDs(list, "prompt", r)
}

// decodeIDs reads a prompt given as token ids (param names the list).
func decodeIDs(list []json.RawMessage, param string, r *GenRequest) error {
	r.PromptIsIDs, r.idsParam = true, param
	r.PromptIDs = make([]int32, len(list))
	for i, item := range list {
		var id int64
		if err := json.Unmarshal(item, &id); err != nil || id < 0 || id > math.MaxInt32 {
			return badRequest(fmt.Sprintf("%s[%d]", param, i), "invalid_type", "%s[%d] is %s; a token id list holds non-negative integers", param, i, abbreviate(item))
		}
		r.PromptIDs[i] = int32(id)
	}
	return nil
}

// decodeStop reads stop: absent or null, a string, or a list of strings
// (at most maxStops). Empty strings are dropped.
func decodeStop(raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var list []string
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, badRequest("stop", "invalid_type", "stop is not a valid string")
		}
		list = []string{s}
	} else if err := json.Unmarshal(raw, &list); err != nil {
		return nil, badRequest("stop", "invalid_type", "stop must be a string or a list of strings")
	}
	if len(list) > maxStops {
		return nil, badRequest("stop", "invalid_value", "stop has %d sequences; at most %d", len(list), maxStops)
	}
	out := list[:0]
	for _, s := range list {
		if s != "" {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// abbreviate shortens a JSON value for a message.
func abbreviate(raw json.RawMessage) string {
	s := string(bytes.TrimSpace(raw))
	if len(s) > 40 {
		return s[:37] + "..."
	}
	return s
}
