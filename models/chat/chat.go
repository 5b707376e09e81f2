// Package chat renders a checkpoint's chat template: the Jinja template in
// its tokenizer_config.json that turns a conversation into the prompt text
// the model was trained on. Rendering follows transformers'
// apply_chat_template: trim_blocks and lstrip_blocks, loop controls, the
// tojson filter (Python's json.dumps with ensure_ascii off), and the
// raise_exception and strftime_now globals, with bos_token, eos_token,
// messages and add_generation_prompt as variables.
//
// The Jinja engine is github.com/ardanlabs/jinja. This package supplies what
// that engine does differently from Python's jinja2 in ways chat templates
// meet: a tojson that matches json.dumps byte for byte (key order, indent,
// separators, ensure_ascii, sort_keys, float formatting), strftime_now with
// Python's directives and a settable clock, raise_exception reported as a
// *RaiseError, and jinja2's handling of the template's line endings.
package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/ardanlabs/jinja"
)

// ErrNoTemplate is returned by Load and Parse when tokenizer_config.json has
// no chat_template.
var ErrNoTemplate = errors.New("no chat_template")

// Template is a compiled chat template with the special tokens it is
// rendered with.
type Template struct {
	// Name is the name of the template chosen from a list of named
	// templates ("default" for a single template).
	Name string
	// Source is the template text as the config holds it.
	Source string
	// BOS and EOS are the bos_token and eos_token variables (nil: None).
	BOS, EOS *string
	// Now is the clock strftime_now reads; nil means time.Now.
	Now func() time.Time

	origin string
	tmpl   *jinja.Template
}

// RaiseError is the error a template raises with raise_exception.
type RaiseError struct {
	// Template names the template (its file).
	Template string
	// Message is the template's message.
	Message string
}

// Error names the template and the message it raised.
func (e *RaiseError) Error() string {
	return fmt.Sprintf("chat template %s: %s", e.Template, e.Message)
}

// Load reads a tokenizer_config.json and compiles its chat template (the
// one named "default" when chat_template is a list of named templates).
func Load(path string) (*Template, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(data, path)
}

// Parse compiles the chat template of a tokenizer_config.json's contents.
// source names the data in errors. It returns an error wrapping
// ErrNoTemplate when there is no chat_template.
func Parse(data []byte, source string) (*Template, error) {
	var cfg struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
		BOS          json.RawMessage `json:"bos_token"`
		EOS          json.RawMessage `json:"eos_token"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("%s: not a valid tokenizer_config.json: %v", source, err)
	}
	name, text, err := pickTemplate(cfg.ChatTemplate, source)
	if err != nil {
		return nil, err
	}
	bos, err := specialToken(cfg.BOS, source, "bos_token")
	if err != nil {
		return nil, err
	}
	eos, err := specialToken(cfg.EOS, source, "eos_token")
	if err != nil {
		return nil, err
	}
	t, err := New(text, bos, eos, source)
	if err != nil {
		return nil, err
	}
	t.Name = name
	return t, nil
}

// pickTemplate reads chat_template: a string, or a list of
// {"name", "template"} objects of which "default" is used.
func pickTemplate(raw json.RawMessage, source string) (name, text string, err error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", "", fmt.Errorf("%s: %w", source, ErrNoTemplate)
	}
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &text); err != nil {
			return "", "", fmt.Errorf("%s: chat_template: %v", source, err)
		}
		return "default", text, nil
	}
	var named []struct {
		Name     *string `json:"name"`
		Template *string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", "", fmt.Errorf("%s: chat_template must be a string or a list of {\"name\", \"template\"} objects: %v", source, err)
	}
	var names []string
	for i, n := range named {
		if n.Name == nil || n.Template == nil {
			return "", "", fmt.Errorf("%s: chat_template[%d] needs a name and a template", source, i)
		}
		if *n.Name == "default" {
			return "default", *n.Template, nil
		}
		names = append(names, *n.Name)
	}
	return "", "", fmt.Errorf("%s: chat_template has no template named \"default\" (it has %q)", source, names)
}

// specialToken reads bos_token or eos_token: a string, an
// {"content": ...} object (older configs), or null.
func specialToken(raw json.RawMessage, source, field string) (*string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return &s, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
		return nil, fmt.Errorf("%s: %s must be a string or an object with a content string", source, field)
	}
	return obj.Content, nil
}

// New compiles a chat template's source. bos and eos are the bos_token and
// eos_token variables (nil for None); origin names the template in errors.
func New(source string, bos, eos *string, origin string) (*Template, error) {
	tmpl, err := jinja.Compile(prepare(source))
	if err != nil {
		return nil, fmt.Errorf("%s: chat template: %v", origin, err)
	}
	return &Template{Name: "default", Source: source, BOS: bos, EOS: eos, origin: origin, tmpl: tmpl}, nil
}

// tojsonName is the name the template's tojson filter is renamed to, so
// that the package's json.dumps-compatible filter is used.
const tojsonName = "flextensor_tojson"

// prepare turns the template source into what the engine compiles: line
// endings normalized to "\n" and one trailing newline dropped, as jinja2
// does (newline_sequence "\n", keep_trailing_newline off), and the tojson
// filter renamed (see rewriteFilter).
func prepare(src string) string {
	src = strings.ReplaceAll(src, "\r\n", "\n")
	src = strings.ReplaceAll(src, "\r", "\n")
	src = strings.TrimSuffix(src, "\n")
	return rewriteFilter(src, "tojson", tojsonName)
}

// rewriteFilter renames the filter from to "to" wherever it is applied
// ("| from") inside {{ }} and {% %} tags, outside string literals and
// comments.
func rewriteFilter(src, from, to string) string {
	var b strings.Builder
	b.Grow(len(src))
	i := 0
	for i < len(src) {
		open := strings.IndexByte(src[i:], '{')
		if open < 0 || open+i+1 >= len(src) {
			b.WriteString(src[i:])
			break
		}
		open += i
		b.WriteString(src[i:open])
		var closer string
		switch src[open+1] {
		case '{':
			closer = "}}"
		case '%':
			closer = "%}"
		case '#':
			closer = "#}"
		default:
			b.WriteByte('{')
			i = open + 1
			continue
		}
		b.WriteString(src[open : open+2])
		j := open + 2
		var quote byte
		afterPipe := false
		for j < len(src) && (quote != 0 || !strings.HasPrefix(src[j:], closer)) {
			c := src[j]
			switch {
			case closer == "#}":
			case quote != 0:
				if c == '\\' && j+1 < len(src) {
					b.WriteByte(c)
					j++
					c = src[j]
				} else if c == quote {
					quote = 0
				}
			case c == '\'' || c == '"':
				quote = c
				afterPipe = false
			case c == '|':
				afterPipe = true
			case c == ' ' || c == '\t' || c == '\n':
			case afterPipe && strings.HasPrefix(src[j:], from) && !isIdent(src, j+len(from)):
				b.WriteString(to)
				j += len(from)
				afterPipe = false
				continue
			default:
				afterPipe = false
			}
			b.WriteByte(c)
			j++
		}
		end := min(j+len(closer), len(src))
		b.WriteString(src[j:end])
		i = end
	}
	return b.String()
}

func isIdentByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func isIdent(s string, i int) bool { return i < len(s) && isIdentByte(s[i]) }

// Options are the inputs of a rendering besides the messages.
type Options struct {
	// AddGenerationPrompt adds the start of an assistant turn.
	AddGenerationPrompt bool
	// Vars are further template variables (tools, enable_thinking,
	// date_string, ...) as JSON values; key order within objects is kept.
	Vars map[string]json.RawMessage
}

// Render renders the conversation. messages is a JSON array of message
// objects (see ParseMessages). A raise_exception in the template gives a
// *RaiseError.
func (t *Template) Render(messages []Message, opt Options) (string, error) {
	vals := make(map[string]jinja.Value, len(opt.Vars)+8)
	for k, raw := range opt.Vars {
		v, err := fromJSON(raw)
		if err != nil {
			return "", fmt.Errorf("chat template variable %s: %v", k, err)
		}
		vals[k] = v
	}
	list := make([]jinja.Value, len(messages))
	for i, m := range messages {
		v, err := m.value()
		if err != nil {
			return "", fmt.Errorf("message %d: %v", i, err)
		}
		list[i] = v
	}
	vals["messages"] = jinja.NewList(list)
	vals["add_generation_prompt"] = jinja.NewBool(opt.AddGenerationPrompt)
	vals["bos_token"] = optString(t.BOS)
	vals["eos_token"] = optString(t.EOS)
	var raised *RaiseError
	vals["raise_exception"] = jinja.NewCallable("raise_exception", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		msg := ""
		if len(args) > 0 {
			msg = printValue(args[0])
		}
		raised = &RaiseError{Template: t.origin, Message: msg}
		return jinja.Undefined(), raised
	})
	now := t.Now
	if now == nil {
		now = time.Now
	}
	vals["strftime_now"] = jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		if len(args) != 1 || !args[0].IsString() {
			return jinja.Undefined(), errors.New("strftime_now takes one format string")
		}
		s, err := strftime(now(), args[0].AsString())
		if err != nil {
			return jinja.Undefined(), err
		}
		return jinja.NewString(s), nil
	})
	vals[tojsonName] = jinja.NewCallable("tojson", filterToJSON)
	out, err := t.tmpl.RenderValues(vals)
	if raised != nil {
		return "", raised
	}
	if err != nil {
		return "", fmt.Errorf("%s: rendering the chat template: %v", t.origin, err)
	}
	return out, nil
}

func optString(s *string) jinja.Value {
	if s == nil {
		return jinja.None()
	}
	return jinja.NewString(*s)
}

// printValue is how {{ x }} prints a string or number argument.
func printValue(v jinja.Value) string {
	switch {
	case v.IsString():
		return v.AsString()
	case v.IsNone():
		return "None"
	}
	s, err := dumps(v, dumpOptions{itemSep: ", ", keySep: ": "})
	if err != nil {
		return v.String()
	}
	return s
}

// EndTexts returns the texts that end an assistant turn: the eos_token and
// the text the template writes right after an assistant message's content
// (up to the first white space, e.g. "<|im_end|>" or "<|eot_id|>"), each
// once. A generation stops at any of them.
func (t *Template) EndTexts() []string {
	var out []string
	add := func(s string) {
		if s == "" {
			return
		}
		for _, o := range out {
			if o == s {
				return
			}
		}
		out = append(out, s)
	}
	if t.EOS != nil {
		add(*t.EOS)
	}
	const sentinel = "\x00flextensor-end-probe\x00"
	text, err := t.Render([]Message{
		{Role: "user", Content: "hi"},
		{Role: "assistant", Content: sentinel},
	}, Options{})
	if err == nil {
		if i := strings.LastIndex(text, sentinel); i >= 0 {
			rest := text[i+len(sentinel):]
			if j := strings.IndexAny(rest, " \t\r\n"); j >= 0 {
				rest = rest[:j]
			}
			add(rest)
		}
	}
	return out
}
