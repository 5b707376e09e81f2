package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/internal/testfile"
	"github.com/flextensor-go/flextensor/models/llama"
)

type refFile struct {
	GreedyPrompt       []int32 `json:"greedy_prompt"`
	GreedyContinuation []int32 `json:"greedy_continuation"`
}

func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = runMain(args, &o, &e)
	return code, o.String(), e.String()
}

func joinInts(ids []int32) string { return joinIDs(ids) }

// TestRunModelGreedyJSON: the CLI prints exactly the reference's greedy
// continuation, for the checkpoint directory and for the bundled model.
func TestRunModelGreedyJSON(t *testing.T) {
	data, err := os.ReadFile("../../testdata/tiny-llama/reference.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref refFile
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	for _, model := range []string{"../../testdata/tiny-llama", ""} {
		args := []string{"run-model", "--token-ids", joinInts(ref.GreedyPrompt), "--max-new-tokens", "20", "--temperature", "0", "--json"}
		if model != "" {
			args = append(args, "--model", model)
		}
		code, out, errOut := run(t, args...)
		if code != 0 {
			t.Fatalf("model %q: exit %d, stderr %s", model, code, errOut)
		}
		var got struct {
			PromptIDs    []int32 `json:"prompt_ids"`
			GeneratedIDs []int32 `json:"generated_ids"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("output is not one JSON object: %v\n%s", err, out)
		}
		if !slices.Equal(got.PromptIDs, ref.GreedyPrompt) || !slices.Equal(got.GeneratedIDs, ref.GreedyContinuation) {
			t.Fatalf("model %q: got %v → %v, want %v", model, got.PromptIDs, got.GeneratedIDs, ref.GreedyContinuation)
		}
	}
}

func TestRunModelSamplingIsSeeded(t *testing.T) {
	args := []string{"run-model", "--token-ids", "5,6,7", "--max-new-tokens", "12", "--temperature", "1.2", "--top-k", "40", "--top-p", "0.9", "--ignore-eos", "--json"}
	_, a, _ := run(t, append(args, "--seed", "7")...)
	_, b, _ := run(t, append(args, "--seed", "7")...)
	_, c, _ := run(t, append(args, "--seed", "8")...)
	ids := func(s string) []int32 {
		var v struct {
			G []int32 `json:"generated_ids"`
		}
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			t.Fatalf("bad JSON %q: %v", s, err)
		}
		return v.G
	}
	if !slices.Equal(ids(a), ids(b)) {
		t.Fatal("same seed, different samples")
	}
	if slices.Equal(ids(a), ids(c)) {
		t.Fatal("different seeds gave identical 12-token samples")
	}
}

func TestRunModelErrors(t *testing.T) {
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"run-model"}, 2, "give exactly one of --prompt TEXT or --token-ids"},
		{[]string{"run-model", "--token-ids", "1,x"}, 2, `item 1 ("x")`},
		{[]string{"run-model", "--token-ids", "1,512"}, 2, "id 512 at position 1 is outside the vocabulary [0, 512)"},
		{[]string{"run-model", "--token-ids", "1", "--top-p", "2"}, 2, "--top-p 2"},
		{[]string{"run-model", "--token-ids", "1", "--device", "tpu"}, 2, `--device "tpu"`},
		{[]string{"run-model", "--token-ids", "1", "--bogus"}, 2, "unknown flag: --bogus"},
		{[]string{"run-model", "--token-ids", "1", "--model", "/nonexistent/dir"}, 1, "/nonexistent/dir"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
	}
	for _, c := range cases {
		code, _, errOut := run(t, c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d mentioning %q", c.args, code, errOut, c.code, c.want)
		}
	}
}

func TestHelp(t *testing.T) {
	code, out, _ := run(t, "--help")
	if code != 0 || !strings.Contains(out, "run-model") {
		t.Fatalf("infer --help: exit %d, %q", code, out)
	}
	code, out, _ = run(t, "run-model", "--help")
	if code != 0 || !strings.Contains(out, "Examples:") || !strings.Contains(out, "--max-new-tokens") {
		t.Fatalf("run-model --help: exit %d, %q", code, out)
	}
}

// TestRunModelOffloaded: with a budget the engine streams layers, and the
// greedy ids are still the reference's; --offload-timing prints the table.
func TestRunModelOffloaded(t *testing.T) {
	data, _ := os.ReadFile("../../testdata/tiny-llama/reference.json")
	var ref refFile
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	for _, budget := range []string{"1MiB", "0.5"} {
		code, out, errOut := run(t, "run-model", "--token-ids", joinInts(ref.GreedyPrompt), "--max-new-tokens", "20",
			"--json", "--device-memory", "2MiB", "--gpu-budget", budget, "--offload-timing")
		if code != 0 {
			t.Fatalf("budget %s: exit %d: %s", budget, code, errOut)
		}
		var got struct {
			GeneratedIDs []int32 `json:"generated_ids"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.GeneratedIDs, ref.GreedyContinuation) {
			t.Fatalf("budget %s: got %v, want %v", budget, got.GeneratedIDs, ref.GreedyContinuation)
		}
		for _, want := range []string{"model.layers.3", "streamed", "transfer ms", "plan predicted"} {
			if !strings.Contains(errOut, want) {
				t.Errorf("budget %s: timing table lacks %q:\n%s", budget, want, errOut)
			}
		}
	}
	code, _, errOut := run(t, "run-model", "--token-ids", "1,2", "--gpu-budget", "0.5")
	if code != 2 || !strings.Contains(errOut, "the cpu device has no size: give --device-memory") {
		t.Errorf("fraction without a device limit: exit %d, %q", code, errOut)
	}
	code, _, errOut = run(t, "run-model", "--token-ids", "1,2", "--gpu-budget", "lots")
	if code != 2 || !strings.Contains(errOut, `"lots"`) {
		t.Errorf("bad budget: exit %d, %q", code, errOut)
	}
}

func TestBench(t *testing.T) {
	code, out, errOut := run(t, "bench", "--device-memory", "64MiB", "--budgets", "0,1MiB,resident", "--context", "16", "--iters", "2", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 JSON rows, got %q", out)
	}
	var row struct {
		StreamedUnits int     `json:"streamed_units"`
		FloorMs       float64 `json:"floor_ms"`
		MeasuredMs    float64 `json:"measured_ms"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &row); err != nil {
		t.Fatal(err)
	}
	if row.StreamedUnits != 4 || row.FloorMs <= 0 || row.MeasuredMs <= 0 {
		t.Errorf("budget 0 row: %+v (want all 4 layers streamed, positive floor and time)", row)
	}
	// The resident decode row also times greedy generation (run-model's
	// loop); the offloaded rows do not.
	var res struct {
		Budget     string  `json:"budget"`
		GenerateMs float64 `json:"generate_ms"`
	}
	if err := json.Unmarshal([]byte(lines[2]), &res); err != nil {
		t.Fatal(err)
	}
	if res.Budget != "resident" || !(res.GenerateMs > 0) {
		t.Errorf("resident row %s: want a positive generate_ms", lines[2])
	}
	if strings.Contains(lines[0], "generate_ms") {
		t.Errorf("budget 0 row has generate_ms: %s", lines[0])
	}
}

// TestProfileThenRun: infer profile writes a profile; run-model --profile
// restarts from it and generates the reference continuation.
func TestProfileThenRun(t *testing.T) {
	data, _ := os.ReadFile("../../testdata/tiny-llama/reference.json")
	var ref refFile
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	code, out, errOut := run(t, "profile", "--device-memory", "4MiB", "--gpu-budget", "0.3", "--out", dir)
	if code != 0 || !strings.Contains(out, "profile.json") {
		t.Fatalf("profile: exit %d, %q, %q", code, out, errOut)
	}
	code, out, errOut = run(t, "run-model", "--profile", dir, "--device-memory", "4MiB", "--strict",
		"--token-ids", joinInts(ref.GreedyPrompt), "--max-new-tokens", "20", "--json")
	if code != 0 {
		t.Fatalf("run-model --profile: exit %d: %s", code, errOut)
	}
	var got struct {
		GeneratedIDs []int32 `json:"generated_ids"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.GeneratedIDs, ref.GreedyContinuation) {
		t.Fatalf("got %v, want %v", got.GeneratedIDs, ref.GreedyContinuation)
	}
	code, _, errOut = run(t, "run-model", "--profile", dir, "--gpu-budget", "1MiB", "--token-ids", "1")
	if code != 2 || !strings.Contains(errOut, "exclude each other") {
		t.Errorf("--profile with --gpu-budget: exit %d, %q", code, errOut)
	}
	code, _, errOut = run(t, "run-model", "--profile", t.TempDir(), "--token-ids", "1")
	if code != 1 || !strings.Contains(errOut, "profile.json") {
		t.Errorf("--profile of an empty directory: exit %d, %q", code, errOut)
	}
}

// TestProfileStreamCodecCLI: `infer profile --stream-codec exp4` says its
// streamed layers travel packed, `run-model --profile` of it gives the
// reference's greedy tokens without being told the codec, and asking for
// exp4 with a profile made without it is a usage error (exit 2) naming the
// profile.
func TestProfileStreamCodecCLI(t *testing.T) {
	data, _ := os.ReadFile("../../testdata/tiny-llama/reference.json")
	var ref refFile
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	packed, plain := t.TempDir(), t.TempDir()
	code, out, errOut := run(t, "profile", "--device-memory", "4MiB", "--gpu-budget", "0", "--stream-codec", "exp4", "--out", packed)
	if code != 0 || !strings.Contains(out, "exp4-packed") {
		t.Fatalf("profile --stream-codec exp4: exit %d, %q, %q", code, out, errOut)
	}
	code, out, errOut = run(t, "run-model", "--profile", packed, "--device-memory", "4MiB", "--strict",
		"--token-ids", joinInts(ref.GreedyPrompt), "--max-new-tokens", "20", "--json")
	if code != 0 {
		t.Fatalf("run-model --profile (exp4): exit %d: %s", code, errOut)
	}
	var got struct {
		GeneratedIDs []int32 `json:"generated_ids"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.GeneratedIDs, ref.GreedyContinuation) {
		t.Fatalf("from the exp4 profile: got %v, want %v", got.GeneratedIDs, ref.GreedyContinuation)
	}
	if code, out, errOut = run(t, "profile", "--device-memory", "4MiB", "--gpu-budget", "0", "--out", plain); code != 0 || strings.Contains(out, "exp4") {
		t.Fatalf("profile: exit %d, %q, %q", code, out, errOut)
	}
	code, _, errOut = run(t, "run-model", "--profile", plain, "--device-memory", "4MiB", "--stream-codec", "exp4", "--token-ids", "1")
	if code != 2 || !strings.Contains(errOut, plain) || !strings.Contains(errOut, "exp4") {
		t.Errorf("--stream-codec exp4 with a plain profile: exit %d, %q", code, errOut)
	}
}

func TestTokenize(t *testing.T) {
	var ref struct {
		Samples []struct {
			Text string `json:"text"`
			IDs  []int  `json:"ids"`
		} `json:"samples"`
	}
	testfile.ReadJSON(t, "../../testdata/tiny-llama/tokenizer_reference.json", &ref)
	for _, s := range ref.Samples {
		for _, src := range [][]string{{"--model", "../../testdata/tiny-llama"}, {"--tokenizer", "../../testdata/tiny-llama/tokenizer.json"}} {
			args := append([]string{"tokenize", "--text", s.Text, "--add-special", "--json"}, src...)
			code, out, errOut := run(t, args...)
			if code != 0 {
				t.Fatalf("%v: exit %d %s", args, code, errOut)
			}
			var got struct {
				IDs []int `json:"ids"`
			}
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.IDs, s.IDs) {
				t.Errorf("%q: got %v, want %v", s.Text, got.IDs, s.IDs)
			}
		}
	}
	// Without --add-special there is no BOS.
	_, out, _ := run(t, "tokenize", "--text", "Hello, world!", "--json")
	if strings.Contains(out, "[0,") {
		t.Errorf("BOS added without --add-special: %s", out)
	}
	code, _, errOut := run(t, "tokenize", "--text", "x", "--tokenizer", "/nonexistent/tokenizer.json")
	if code != 1 || !strings.Contains(errOut, "/nonexistent/tokenizer.json") {
		t.Errorf("missing tokenizer: exit %d %q", code, errOut)
	}
	code, _, _ = run(t, "tokenize")
	if code != 2 {
		t.Errorf("tokenize without --text: exit %d, want 2", code)
	}
}

// TestPromptStreamsText: --prompt tokenizes with BOS, the reply streams to
// stdout, and --json carries the same text.
func TestPromptStreamsText(t *testing.T) {
	code, jsonOut, errOut := run(t, "run-model", "--prompt", "Hello, world!", "--max-new-tokens", "12", "--ignore-eos", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var got struct {
		PromptIDs []int32 `json:"prompt_ids"`
		Text      string  `json:"text"`
	}
	if err := json.Unmarshal([]byte(jsonOut), &got); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.PromptIDs, []int32{0, 41, 70, 358, 80, 13, 279, 264, 77, 69, 2}) || got.Text == "" {
		t.Fatalf("prompt ids %v, text %q", got.PromptIDs, got.Text)
	}
	code, textOut, errOut := run(t, "run-model", "--prompt", "Hello, world!", "--max-new-tokens", "12", "--ignore-eos")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if textOut != printable(got.Text)+"\n" {
		t.Fatalf("streamed %q, JSON text %q", textOut, got.Text)
	}
	code, _, errOut = run(t, "run-model", "--prompt", "hi", "--token-ids", "1")
	if code != 2 || !strings.Contains(errOut, "exactly one of") {
		t.Errorf("--prompt with --token-ids: exit %d %q", code, errOut)
	}
	code, _, errOut = run(t, "run-model", "--prompt", "hi", "--chat")
	if code != 2 || !strings.Contains(errOut, "not a Llama 3 instruct checkpoint") {
		t.Errorf("--chat on a base model: exit %d %q", code, errOut)
	}
}

// TestChat: with a Llama 3 instruct tokenizer the prompt is wrapped in the
// chat format and <|eot_id|> ends the reply.
func TestChat(t *testing.T) {
	dir := t.TempDir()
	cfg := llama.Shapes["deep-test"]
	cfg.VocabSize, cfg.HiddenSize, cfg.IntermediateSize, cfg.NumHiddenLayers = 128256, 16, 32, 1
	cfg.HeadDim, cfg.NumAttentionHeads, cfg.NumKeyValueHeads = 8, 2, 1
	cfg.BOSTokenID, cfg.EOSTokenIDs = 128000, []int{128001}
	if err := llama.MakeCheckpoint(dir, cfg, 1, 1<<30); err != nil {
		t.Fatal(err)
	}
	data := testfile.Read(t, "../../models/tokenizer/testdata/llama3-8b-instruct.tokenizer.json.gz")
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "run-model", "--model", dir, "--chat", "--prompt", "Hi!", "--max-new-tokens", "2", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var got struct {
		PromptIDs []int32 `json:"prompt_ids"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	// <|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n
	want := []int32{128000, 128006, 882, 128007, 271, 13347, 0, 128009, 128006, 78191, 128007, 271}
	if !slices.Equal(got.PromptIDs, want) {
		t.Fatalf("chat prompt ids %v, want %v", got.PromptIDs, want)
	}
}

func TestEveryCommandHasHelp(t *testing.T) {
	for name := range commands {
		code, out, errOut := run(t, name, "--help")
		if code != 0 || !strings.Contains(out, "Examples:") || !strings.Contains(out, "Usage:") || !strings.Contains(out, "Flags:") || errOut != "" {
			t.Errorf("infer %s --help: exit %d, stdout %q, stderr %q", name, code, out, errOut)
		}
		code, out2, _ := run(t, "help", name)
		if code != 0 || out2 != out {
			t.Errorf("infer help %s: exit %d, output differs from --help", name, code)
		}
	}
}

func TestEnvironmentAndConfigFile(t *testing.T) {
	t.Setenv("FT_MAX_NEW_TOKENS", "3")
	code, out, errOut := run(t, "run-model", "--token-ids", "1,2", "--ignore-eos", "--json")
	if code != 0 || !strings.Contains(out, `"generated_ids":[`) || strings.Count(out[strings.Index(out, "generated_ids"):], ",") < 2 {
		t.Fatalf("FT_MAX_NEW_TOKENS: exit %d %q %q", code, out, errOut)
	}
	ids := func(s string) []int32 {
		var v struct {
			G []int32 `json:"generated_ids"`
		}
		json.Unmarshal([]byte(s), &v)
		return v.G
	}
	if n := len(ids(out)); n != 3 {
		t.Fatalf("FT_MAX_NEW_TOKENS=3 gave %d tokens", n)
	}
	// The flag wins over the environment.
	_, out, _ = run(t, "run-model", "--token-ids", "1,2", "--ignore-eos", "--json", "--max-new-tokens", "5")
	if n := len(ids(out)); n != 5 {
		t.Fatalf("flag 5 over FT 3 gave %d tokens", n)
	}
	// The config file is below the environment; its command section applies.
	cfg := filepath.Join(t.TempDir(), "ft.json")
	os.WriteFile(cfg, []byte(`{"max-new-tokens": 9, "run-model": {"ignore-eos": true}}`), 0o644)
	_, out, _ = run(t, "run-model", "--token-ids", "1,2", "--json", "--config", cfg)
	if n := len(ids(out)); n != 3 {
		t.Fatalf("environment 3 over file 9 gave %d tokens", n)
	}
	os.Unsetenv("FT_MAX_NEW_TOKENS")
	t.Setenv("FT_CONFIG", cfg)
	_, out, _ = run(t, "run-model", "--token-ids", "1,2", "--json")
	if n := len(ids(out)); n != 9 {
		t.Fatalf("FT_CONFIG file gave %d tokens, want 9", n)
	}
	t.Setenv("FT_GPU_BUDGE", "1GiB")
	code, _, errOut = run(t, "run-model", "--token-ids", "1")
	if code != 2 || !strings.Contains(errOut, "FT_GPU_BUDGE") || !strings.Contains(errOut, "did you mean FT_GPU_BUDGET") {
		t.Fatalf("unknown FT_ variable: exit %d %q", code, errOut)
	}
	os.Unsetenv("FT_GPU_BUDGE")
	os.WriteFile(cfg, []byte(`{"max-new-tokns": 9}`), 0o644)
	code, _, errOut = run(t, "run-model", "--token-ids", "1")
	if code != 2 || !strings.Contains(errOut, `did you mean "max-new-tokens"`) {
		t.Fatalf("unknown config key: exit %d %q", code, errOut)
	}
}

func TestInspect(t *testing.T) {
	code, out, errOut := run(t, "inspect", "--gpu-budget", "1.2MiB", "--json")
	if code != 0 {
		t.Fatalf("exit %d %s", code, errOut)
	}
	var rep struct {
		Parameters    int64                   `json:"parameters"`
		BytesByDType  map[string]int64        `json:"bytes_by_dtype"`
		Units         []struct{ Bytes int64 } `json:"units"`
		ResidentUnits int                     `json:"resident_units"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Parameters != 869504 || rep.BytesByDType["BF16"] != 2*869504 || len(rep.Units) != 4 || rep.Units[0].Bytes != 369152 {
		t.Fatalf("inspect: %+v", rep)
	}
	if rep.ResidentUnits < 0 || rep.ResidentUnits > 2 {
		t.Fatalf("1.2 MiB keeps %d units resident", rep.ResidentUnits)
	}
}

// TestRunModelFamilies: run-model picks each fixture's family from its
// config.json and reproduces transformers' greedy continuation.
func TestRunModelFamilies(t *testing.T) {
	for _, fixture := range []string{"tiny-qwen2", "tiny-qwen3", "tiny-mistral", "tiny-mixtral", "tiny-qwen3moe"} {
		t.Run(fixture, func(t *testing.T) {
			dir := "../../testdata/" + fixture
			data, err := os.ReadFile(dir + "/reference.json")
			if err != nil {
				t.Fatal(err)
			}
			var ref refFile
			if err := json.Unmarshal(data, &ref); err != nil {
				t.Fatal(err)
			}
			code, out, errOut := run(t, "run-model", "--model", dir, "--token-ids", joinInts(ref.GreedyPrompt),
				"--max-new-tokens", fmt.Sprint(len(ref.GreedyContinuation)), "--temperature", "0", "--ignore-eos", "--json")
			if code != 0 {
				t.Fatalf("exit %d, stderr %s", code, errOut)
			}
			var got struct {
				GeneratedIDs []int32 `json:"generated_ids"`
			}
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("output is not one JSON object: %v\n%s", err, out)
			}
			if !slices.Equal(got.GeneratedIDs, ref.GreedyContinuation) {
				t.Fatalf("got %v, want %v", got.GeneratedIDs, ref.GreedyContinuation)
			}
		})
	}
}
