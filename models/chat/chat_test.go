package chat

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

type casesFile struct {
	Now   string `json:"now"`
	Cases []struct {
		Name                string                     `json:"name"`
		Template            string                     `json:"template"`
		BOS                 *string                    `json:"bos_token"`
		EOS                 *string                    `json:"eos_token"`
		AddGenerationPrompt bool                       `json:"add_generation_prompt"`
		Vars                map[string]json.RawMessage `json:"vars"`
		Messages            json.RawMessage            `json:"messages"`
	} `json:"cases"`
}

type referenceFile struct {
	Reference  string `json:"reference"`
	Renderings []struct {
		Name  string  `json:"name"`
		Text  *string `json:"text"`
		Error *string `json:"error"`
	} `json:"renderings"`
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// loadCaseTemplate loads a case's template as gen/render.py does.
func loadCaseTemplate(t *testing.T, path string, bos, eos *string) *Template {
	t.Helper()
	full := filepath.Join("testdata", path)
	if strings.HasSuffix(path, ".json") {
		tmpl, err := Load(full)
		if err != nil {
			t.Fatal(err)
		}
		return tmpl
	}
	src, err := os.ReadFile(full)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := New(string(src), bos, eos, full)
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// TestMatchesJinja2 renders every conversation of testdata/cases.json and
// compares with Python jinja2's rendering (testdata/reference_renderings.json):
// the real Qwen3 and Llama 3.1 templates and synthetic ones covering the
// features chat templates use.
func TestMatchesJinja2(t *testing.T) {
	var cases casesFile
	var ref referenceFile
	readJSON(t, "testdata/cases.json", &cases)
	readJSON(t, "testdata/reference_renderings.json", &ref)
	if len(cases.Cases) != len(ref.Renderings) || len(cases.Cases) < 15 {
		t.Fatalf("%d cases, %d renderings", len(cases.Cases), len(ref.Renderings))
	}
	now, err := time.Parse("2006-01-02T15:04:05", cases.Now)
	if err != nil {
		t.Fatal(err)
	}
	errorsSeen := 0
	for i, c := range cases.Cases {
		want := ref.Renderings[i]
		if want.Name != c.Name {
			t.Fatalf("case %d is %q in cases.json, %q in the reference", i, c.Name, want.Name)
		}
		t.Run(c.Name, func(t *testing.T) {
			tmpl := loadCaseTemplate(t, c.Template, c.BOS, c.EOS)
			tmpl.Now = func() time.Time { return now }
			msgs, err := ParseMessages(c.Messages)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tmpl.Render(msgs, Options{AddGenerationPrompt: c.AddGenerationPrompt, Vars: c.Vars})
			if want.Error != nil {
				var re *RaiseError
				if !errors.As(err, &re) || re.Message != *want.Error {
					t.Fatalf("got %q, %v; want the template to raise %q", got, err, *want.Error)
				}
				if !strings.Contains(err.Error(), *want.Error) || !strings.Contains(err.Error(), c.Template) {
					t.Errorf("error %q should name the template and give its message", err)
				}
				errorsSeen++
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != *want.Text {
				t.Errorf("rendering differs from jinja2's\n got %q\nwant %q", got, *want.Text)
			}
		})
	}
	if errorsSeen < 2 {
		t.Errorf("only %d raising cases", errorsSeen)
	}
	t.Logf("%d renderings; %s", len(cases.Cases), ref.Reference)
}

func TestEndTexts(t *testing.T) {
	for _, c := range []struct {
		file string
		want []string
	}{
		{"qwen3.tokenizer_config.json", []string{"<|im_end|>"}},
		{"llama3_1.tokenizer_config.json", []string{"<|eot_id|>"}},
	} {
		tmpl, err := Load(filepath.Join("testdata", c.file))
		if err != nil {
			t.Fatal(err)
		}
		if got := tmpl.EndTexts(); !slices.Equal(got, c.want) {
			t.Errorf("%s: EndTexts() = %q, want %q", c.file, got, c.want)
		}
	}
	eos := "</s>"
	tmpl, err := New("{% for m in messages %}<{{ m.role }}>{{ m.content }}<|end|>\n{% endfor %}", nil, &eos, "t")
	if err != nil {
		t.Fatal(err)
	}
	if got := tmpl.EndTexts(); !slices.Equal(got, []string{"</s>", "<|end|>"}) {
		t.Errorf("EndTexts() = %q", got)
	}
}

func TestParseConfig(t *testing.T) {
	for _, c := range []struct {
		name, config, wantErr, wantName string
	}{
		{"string", `{"chat_template": "{{ bos_token }}x", "bos_token": "<s>"}`, "", "default"},
		{"named list", `{"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "{{ bos_token }}x"}], "bos_token": {"content": "<s>"}}`, "", "default"},
		{"no template", `{"bos_token": "<s>"}`, "no chat_template", ""},
		{"null template", `{"chat_template": null}`, "no chat_template", ""},
		{"no default", `{"chat_template": [{"name": "rag", "template": "x"}]}`, `no template named "default"`, ""},
		{"bad entry", `{"chat_template": [{"name": "default"}]}`, "chat_template[0] needs a name and a template", ""},
		{"bad type", `{"chat_template": 3}`, "must be a string or a list", ""},
		{"bad bos", `{"chat_template": "x", "bos_token": 3}`, "bos_token must be a string", ""},
		{"bad json", `{"chat_template": `, "not a valid tokenizer_config.json", ""},
		{"bad syntax", `{"chat_template": "{% for %}"}`, "cfg.json: chat template", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			tmpl, err := Parse([]byte(c.config), "cfg.json")
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), "cfg.json") {
					t.Fatalf("err = %v, want one naming cfg.json and containing %q", err, c.wantErr)
				}
				if c.wantErr == "no chat_template" && !errors.Is(err, ErrNoTemplate) {
					t.Errorf("err = %v does not wrap ErrNoTemplate", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := tmpl.Render(nil, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got != "<s>x" || tmpl.Name != c.wantName {
				t.Errorf("rendered %q (template %q)", got, tmpl.Name)
			}
		})
	}
}

func TestParseMessages(t *testing.T) {
	msgs, err := ParseMessages([]byte(`[{"role": "user", "content": "hi"}, {"role": "assistant", "content": null, "tool_calls": []}, {"role": "user", "content": [{"type": "text", "text": "x"}]}]`))
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 3 || msgs[0].Role != "user" || msgs[0].Content != "hi" || msgs[1].Role != "assistant" {
		t.Errorf("parsed %+v", msgs)
	}
	for _, c := range []struct{ in, want string }{
		{`{"role": "user"}`, "expected a JSON array"},
		{`[]`, "empty"},
		{`[3]`, "messages[0]: expected an object"},
		{`[{"content": "x"}]`, "messages[0]: role must be a non-empty string"},
		{`[{"role": "user", "content": "x"}, {"role": "user"}]`, "messages[1] (user): content is missing"},
		{`[{"role": "user", "content": 5}]`, "content must be a string, a list of parts or null"},
	} {
		if _, err := ParseMessages([]byte(c.in)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseMessages(%s) err = %v, want %q", c.in, err, c.want)
		}
	}
}

func TestRenderErrors(t *testing.T) {
	tmpl, err := New("{{ messages[0].content | tojson }}{{ undefined_thing | tojson }}", nil, nil, "t.jinja")
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmpl.Render([]Message{{Role: "user", Content: "x"}}, Options{})
	if err == nil || !strings.Contains(err.Error(), "t.jinja") || !strings.Contains(err.Error(), "undefined") {
		t.Errorf("err = %v", err)
	}
	tmpl, err = New(`{{ strftime_now("%Q") }}`, nil, nil, "t.jinja")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tmpl.Render(nil, Options{}); err == nil || !strings.Contains(err.Error(), "unsupported directive %Q") {
		t.Errorf("err = %v", err)
	}
	if _, err := tmpl.Render(nil, Options{Vars: map[string]json.RawMessage{"tools": json.RawMessage(`[1,`)}}); err == nil || !strings.Contains(err.Error(), "tools") {
		t.Errorf("bad variable: err = %v", err)
	}
}

func TestToJSON(t *testing.T) {
	for _, c := range []struct{ tmpl, want string }{
		{`{{ x | tojson }}`, `{"b": [1, 2.0, 1e-05, 1e+16, 123456789.25, -0.5], "a": "é` + "\x7f" + `\n"}`},
		{`{{ x | tojson(ensure_ascii=True) }}`, `{"b": [1, 2.0, 1e-05, 1e+16, 123456789.25, -0.5], "a": "\u00e9\u007f\n"}`},
		{`{{ x | tojson(sort_keys=True, separators=[",", ":"]) }}`, `{"a":"é` + "\x7f" + `\n","b":[1,2.0,1e-05,1e+16,123456789.25,-0.5]}`},
		{`{{ x.b[:2] | tojson(indent=1) }}`, "[\n 1,\n 2.0\n]"},
		{`{{ {} | tojson(indent=2) }}{{ [] | tojson }}`, "{}[]"},
		{`{{ '😀' | tojson(ensure_ascii=true) }}`, `"\ud83d\ude00"`},
		{`{{ "a|tojson" }}{# x | tojson #} {{ 'q' | tojson }}`, `a|tojson "q"`},
	} {
		tmpl, err := New(c.tmpl, nil, nil, "t")
		if err != nil {
			t.Fatal(err)
		}
		got, err := tmpl.Render(nil, Options{Vars: map[string]json.RawMessage{
			"x": json.RawMessage(`{"b": [1, 2.0, 0.00001, 1e16, 123456789.25, -0.5], "a": "é` + "\x7f" + `\n"}`)}})
		if err != nil {
			t.Fatalf("%s: %v", c.tmpl, err)
		}
		if got != c.want {
			t.Errorf("%s\n got %s\nwant %s", c.tmpl, got, c.want)
		}
	}
}

func TestStrftime(t *testing.T) {
	at := time.Date(2024, 7, 6, 0, 7, 9, 0, time.UTC)
	got, err := strftime(at, "%a %A %b %B %d %-d %e %H %I %-I %j %m %M %p %S %y %Y [%Z%z] %% %h")
	if err != nil {
		t.Fatal(err)
	}
	if want := "Sat Saturday Jul July 06 6  6 00 12 12 188 07 07 AM 09 24 2024 [] % Jul"; got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}
