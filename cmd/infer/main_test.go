package main

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
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
		{[]string{"run-model"}, 2, "--token-ids is required"},
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
	code, _, errOut := run(t, "run-model", "--help")
	if code != 0 || !strings.Contains(errOut, "Examples:") || !strings.Contains(errOut, "--max-new-tokens") {
		t.Fatalf("run-model --help: exit %d, %q", code, errOut)
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
	if code != 1 || !strings.Contains(errOut, "device memory limit") {
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
