package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// readResults parses a results file: a JSON object per line.
func readResults(t *testing.T, path string) []batchResult {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []batchResult
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var r batchResult
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("result line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

func writeBatch(t *testing.T, lines ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "prompts.jsonl")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRunModelBatchFile: a batch file of token-id and text prompts with
// their own sampling settings gives, line by line in the file's order, the
// tokens run-model gives each request alone; bad lines (JSON that does not
// parse, both prompt kinds, an unknown field, a prompt longer than the
// context, a request larger than the whole KV cache) get error results
// (text is there where the tokenizer decodes the tokens)
// naming their line while the others run, and the exit status says that
// some failed.
func TestRunModelBatchFile(t *testing.T) {
	long := strings.Repeat("1,", 300) + "1"
	in := writeBatch(t,
		`{"token_ids": [5, 6, 7], "max_new_tokens": 6, "ignore_eos": true}`,
		`{"prompt": "The license grants", "max_new_tokens": 5, "temperature": 0.9, "top_k": 40, "seed": 4, "ignore_eos": true}`,
		`{"token_ids": [5, 6 "max_new_tokens": 5}`,
		``,
		`{"token_ids": [9, 8, 7, 6, 5, 4, 3, 2, 1, 20, 30, 40, 50, 60, 70, 80, 90], "max_new_tokens": 3, "temperature": 1.1, "seed": 9, "ignore_eos": true}`,
		`{"prompt": "Hi", "token_ids": [1]}`,
		`{"token_ids": [1], "bogus": 2}`,
		`{"token_ids": [`+long+`], "max_new_tokens": 2}`,
		`{"token_ids": [3], "max_new_tokens": 200}`,
	)
	out := filepath.Join(t.TempDir(), "results.jsonl")
	code, _, errOut := run(t, "run-model", "--batch-file", in, "--out", out, "--kv-cache", "160KiB", "--max-batch-tokens", "8")
	if code != 1 || !strings.Contains(errOut, "5 of 8 requests failed") || !strings.Contains(errOut, "tokens/s") {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	res := readResults(t, out)
	if len(res) != 8 {
		t.Fatalf("%d result lines, want 8", len(res))
	}
	alone := func(args ...string) []int32 {
		code, o, e := run(t, append([]string{"run-model", "--json", "--ignore-eos"}, args...)...)
		if code != 0 {
			t.Fatalf("run-model %v: exit %d: %s", args, code, e)
		}
		var v struct {
			G []int32 `json:"generated_ids"`
		}
		if err := json.Unmarshal([]byte(o), &v); err != nil {
			t.Fatal(err)
		}
		return v.G
	}
	for _, c := range []struct {
		i    int
		args []string
	}{
		{0, []string{"--token-ids", "5,6,7", "--max-new-tokens", "6"}},
		{1, []string{"--prompt", "The license grants", "--max-new-tokens", "5", "--temperature", "0.9", "--top-k", "40", "--seed", "4"}},
		{3, []string{"--token-ids", "9,8,7,6,5,4,3,2,1,20,30,40,50,60,70,80,90", "--max-new-tokens", "3", "--temperature", "1.1", "--seed", "9"}},
	} {
		r := res[c.i]
		if r.Index != c.i || r.Error != "" || r.FinishReason != "length" || (c.i == 1 && r.Text == nil) {
			t.Errorf("result %d: %+v", c.i, r)
		}
		if want := alone(c.args...); !slices.Equal(r.GeneratedIDs, want) {
			t.Errorf("result %d: batched %v, alone %v", c.i, r.GeneratedIDs, want)
		}
	}
	for i, want := range map[int]string{
		2: "line 3: not a request object",
		4: "line 6: give exactly one of prompt TEXT or token_ids",
		5: `line 7: not a request object: json: unknown field "bogus"`,
		6: "line 8: token_ids gives 301 tokens and max_new_tokens 2: 303 positions exceed the model's context of 256",
		7: "line 9: generate: the request does not fit",
	} {
		if r := res[i]; r.FinishReason != "error" || !strings.Contains(r.Error, want) || len(r.GeneratedIDs) != 0 {
			t.Errorf("result %d: %+v, want an error containing %q", i, r, want)
		}
	}
	if !strings.Contains(res[7].Error, "give a larger --kv-cache") {
		t.Errorf("a request larger than the cache: %q", res[7].Error)
	}
}

// TestRunModelBatchUsage: an empty batch file, batch flags without
// --batch-file and a --kv-cache below one block are usage errors.
func TestRunModelBatchUsage(t *testing.T) {
	empty := writeBatch(t, "", "  ")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--batch-file", empty}, "has no requests"},
		{[]string{"--out", "x.jsonl"}, "apply with --batch-file only"},
		{[]string{"--batch-file", writeBatch(t, `{"token_ids": [1]}`), "--kv-cache", "1KiB"}, "holds no KV block"},
		{[]string{"--batch-file", writeBatch(t, `{"token_ids": [1]}`), "--prompt", "x"}, "leave out --prompt"},
		{[]string{"--batch-file", "/nonexistent/prompts.jsonl"}, "--batch-file"},
		{[]string{"--swap-space", "1GiB"}, "--swap-space apply with --batch-file only"},
		{[]string{"--batch-file", writeBatch(t, `{"token_ids": [1]}`), "--swap-space", "lots"}, "--swap-space: memory budget \"lots\""},
		{[]string{"--batch-file", writeBatch(t, `{"token_ids": [1]}`), "--swap-space", "0.5"}, "--swap-space 0.5: give bytes"},
	} {
		code, _, errOut := run(t, append([]string{"run-model"}, c.args...)...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, errOut, c.want)
		}
	}
}

// TestBenchBatch: bench --batch prints a row per budget and batch size
// with the step time (the median of the timed steps, each given) and
// tokens/s, offloaded and resident, and for an offloaded budget its plan's
// streamed bytes, link speed, floor and the step over that floor (in the
// table too; "-" for resident rows); a bad size is a usage error.
func TestBenchBatch(t *testing.T) {
	rows := cpuBatchRows(t, 4, "1,3", "2")
	for i, r := range rows {
		if r.Batch != []int{1, 3}[i%2] || r.Budget != []string{"0", "resident"}[i/2] || r.StepMs <= 0 || r.KVBytes <= 0 {
			t.Errorf("row %d: %+v", i, r)
		}
		if got := float64(r.Batch) / (r.StepMs / 1e3); got < r.TokensPerSec*0.999 || got > r.TokensPerSec*1.001 {
			t.Errorf("row %d: tokens/s %.1f, want batch/step = %.1f", i, r.TokensPerSec, got)
		}
		if len(r.StepsMs) != 2 || r.MinMs != min(r.StepsMs[0], r.StepsMs[1]) || r.StepMs != (r.StepsMs[0]+r.StepsMs[1])/2 {
			t.Errorf("row %d: steps %v, min %v, median %v; want the 2 timed steps, their minimum and median", i, r.StepsMs, r.MinMs, r.StepMs)
		}
		if r.Budget == "resident" {
			if r.FloorMs != 0 || r.StreamedBytes != 0 || r.MeasuredVsFlr != 0 {
				t.Errorf("row %d: a resident row with plan figures %+v", i, r)
			}
			continue
		}
		// Budget 0 streams every layer: the plan's floor is at least their
		// copy time over the measured curve, and the row reads against it.
		if r.StreamedUnits == 0 || r.StreamedBytes <= 0 || r.H2DGBps <= 0 || r.TransferMs <= 0 || r.FloorMs < r.TransferMs*0.999 || r.PredictedMs < r.FloorMs*0.999 {
			t.Errorf("row %d: plan figures %+v: want streamed bytes, their copy time, a floor at least that and a prediction at least the floor", i, r)
		}
		if want := r.StepMs / r.FloorMs; math.Abs(r.MeasuredVsFlr-want) > 1e-9*want {
			t.Errorf("row %d: measured over floor %v, want step/floor = %v", i, r.MeasuredVsFlr, want)
		}
	}
	code, text, errOut := run(t, "bench", "--device", "cpu", "--device-memory", "64MiB", "--budgets", "0,resident",
		"--batch", "2", "--context", "5", "--iters", "1", "--warmup", "0")
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if code != 0 || len(lines) < 4 || !strings.Contains(lines[1], "floor ms") || !strings.Contains(lines[1], "meas/flr") ||
		!strings.HasPrefix(lines[2], "0 ") || strings.HasSuffix(strings.TrimSpace(lines[2]), "-") || !strings.HasSuffix(strings.TrimSpace(lines[3]), "-") {
		t.Errorf("bench --batch's table (exit %d, %s):\n%s", code, errOut, text)
	}
	if code, _, errOut := run(t, "bench", "--batch", "1,0"); code != 2 || !strings.Contains(errOut, `"0" is not a positive batch size`) {
		t.Errorf("--batch 1,0: exit %d, %s", code, errOut)
	}
}

// TestBenchBatchSettles: an offloaded budget's batch sizes four times apart
// fall in different plan buckets; before timing each, bench --batch runs
// decode steps until the engine's last pass is steady under the plan of
// the batch's own size, so no timed step is a measuring or switching one
// (unsteady_steps 0, not unsettled), and the larger sizes needed settling
// steps (their bucket measured, planned and switched to); the same for
// packed prefills (--mode prefill), whose first step of a size must not
// be judged by the last size's pass. Resident rows have nothing to settle.
func TestBenchBatchSettles(t *testing.T) {
	rows := cpuBatchRows(t, 6, "1,4,16", "3")
	rows = append(rows, cpuBatchRows(t, 6, "1,4,16", "3", "--mode", "prefill", "--tokens", "8")...) // packed prefills of 8, 32, 128 tokens
	for _, r := range rows {
		if r.Budget == "resident" {
			if r.SettleSteps != 0 || r.Unsettled || r.UnsteadySteps != 0 {
				t.Errorf("resident row %+v: settling figures", r)
			}
			continue
		}
		if r.Unsettled || r.UnsteadySteps != 0 || len(r.StepsMs) != 3 {
			t.Errorf("batch %d: unsettled %v, %d unsteady timed steps of %d; want a steady engine at every timed step", r.Batch, r.Unsettled, r.UnsteadySteps, len(r.StepsMs))
		}
		if r.Batch > 1 && (r.SettleSteps == 0 || r.SettleSteps >= maxSettleSteps) {
			t.Errorf("batch %d (a new bucket): %d settling steps, want some and fewer than %d", r.Batch, r.SettleSteps, maxSettleSteps)
		}
	}
}

// TestBenchBatchKVCache: bench --batch takes --kv-cache (a device flag):
// the cache is that size when it holds every sequence, a usage error naming
// what is needed when it does not; bench without --batch refuses it.
func TestBenchBatchKVCache(t *testing.T) {
	args := []string{"bench", "--device", "cpu", "--budgets", "resident", "--batch", "2", "--context", "5", "--iters", "1", "--warmup", "0", "--json"}
	code, out, errOut := run(t, append(args, "--kv-cache", "1MiB")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r batchBenchRow
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &r); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	if r.KVBytes <= 512<<10 || r.KVBytes > 1<<20 {
		t.Errorf("KV cache of %d bytes, want --kv-cache's 1 MiB rounded down to whole blocks", r.KVBytes)
	}
	if code, _, errOut := run(t, append(args, "--kv-cache", "40KiB")...); code != 2 || !strings.Contains(errOut, "2 sequences of 6 positions need") {
		t.Errorf("--kv-cache 40KiB (one block): exit %d, %s", code, errOut)
	}
	if code, _, errOut := run(t, "bench", "--kv-cache", "1MiB"); code != 2 || !strings.Contains(errOut, "--kv-cache applies to batched runs") {
		t.Errorf("bench --kv-cache without --batch: exit %d, %s", code, errOut)
	}
}

// TestBenchBatchPrefill: bench --batch --mode prefill times packed prefills
// of B sequences × --tokens in one forward, counting prompt tokens, resident
// and offloaded; --kv-cache does not apply there.
func TestBenchBatchPrefill(t *testing.T) {
	code, out, errOut := run(t, "bench", "--device", "cpu", "--device-memory", "64MiB", "--budgets", "resident,0", "--batch", "1,3",
		"--mode", "prefill", "--tokens", "6", "--iters", "1", "--warmup", "0", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	rows := batchRows(t, out)
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4 (2 budgets × 2 sizes): %s", len(rows), out)
	}
	for _, r := range rows {
		if r.PrefillTokens != 6 || r.StepMs <= 0 || r.KVBytes <= 0 {
			t.Errorf("row %+v: want 6 prefill tokens, a positive step time and KV bytes", r)
		}
		if want := float64(r.Batch*6) / (r.StepMs / 1e3); math.Abs(r.TokensPerSec-want) > 1e-6*want {
			t.Errorf("row %+v: %g tokens/s, want batch × tokens / step = %g", r, r.TokensPerSec, want)
		}
	}
	if code, _, errOut := run(t, "bench", "--batch", "2", "--mode", "prefill", "--kv-cache", "1MiB"); code != 2 || !strings.Contains(errOut, "--kv-cache does not apply to --mode prefill") {
		t.Errorf("--kv-cache with prefill: exit %d, %q", code, errOut)
	}
}

// TestRunModelBatchLineValidation: a batch line is checked as run-model's
// flags are (the same code): a request longer than the context, an empty
// prompt or token list, both a prompt (even empty) and token ids, stop
// tokens outside the vocabulary and bad sampling values are error results
// naming the line and the field, as the flags give them, while the good
// lines run.
func TestRunModelBatchLineValidation(t *testing.T) {
	in := writeBatch(t,
		`{"token_ids": [5, 6], "max_new_tokens": 100000}`,
		`{"prompt": ""}`,
		`{"token_ids": [5], "stop_token_ids": [7, 99999]}`,
		`{"token_ids": [5], "temperature": -1}`,
		`{"token_ids": [5], "top_p": 0}`,
		`{"token_ids": []}`,
		`{"token_ids": [5, 6], "max_new_tokens": -3}`,
		`{"prompt": "", "token_ids": [5, 6, 7]}`,
		`{"token_ids": [5, 6, 7], "max_new_tokens": 3, "ignore_eos": true}`,
		`{"prompt": "The license grants", "max_new_tokens": 2, "ignore_eos": true}`,
	)
	out := filepath.Join(t.TempDir(), "results.jsonl")
	code, _, errOut := run(t, "run-model", "--batch-file", in, "--out", out)
	if code != 1 || !strings.Contains(errOut, "8 of 10 requests failed") {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	res := readResults(t, out)
	if len(res) != 10 {
		t.Fatalf("%d result lines, want 10", len(res))
	}
	for i, c := range []struct {
		line string   // the batch line's error
		flag []string // the same request as flags; nil: no flag spells it
		want string   // the flags' error
	}{
		{"line 1: token_ids gives 2 tokens and max_new_tokens 100000: 100002 positions exceed the model's context of 256",
			[]string{"--token-ids", "5,6", "--max-new-tokens", "100000"}, "--token-ids gives 2 tokens and --max-new-tokens 100000: 100002 positions exceed"},
		{"line 2: prompt is empty", []string{"--prompt", ""}, "--prompt is empty"},
		{"line 3: stop_token_ids: id 99999 at position 1 is outside the vocabulary [0, 512)", nil, ""},
		{"line 4: temperature -1: want a finite number ≥ 0", []string{"--token-ids", "5", "--temperature", "-1"}, "--temperature -1: want a finite number ≥ 0"},
		{"line 5: top_p 0: want a number in (0, 1]", []string{"--token-ids", "5", "--top-p", "0"}, "--top-p 0: want a number in (0, 1]"},
		{"line 6: token_ids is empty", []string{"--token-ids", ""}, "--token-ids is empty"},
		{"line 7: max_new_tokens -3 is negative", []string{"--token-ids", "5,6", "--max-new-tokens", "-3"}, "--max-new-tokens -3 is negative"},
		{"line 8: give exactly one of prompt TEXT or token_ids", []string{"--prompt", "", "--token-ids", "5,6,7"}, "give exactly one of --prompt TEXT or --token-ids"},
	} {
		if r := res[i]; r.FinishReason != "error" || !strings.Contains(r.Error, c.line) || len(r.GeneratedIDs) != 0 {
			t.Errorf("result %d: %+v, want an error containing %q", i, r, c.line)
		}
		if c.flag == nil {
			continue
		}
		if code, _, e := run(t, append([]string{"run-model"}, c.flag...)...); code != 2 || !strings.Contains(e, c.want) {
			t.Errorf("run-model %q: exit %d, %s; want a usage error containing %q", c.flag, code, e, c.want)
		}
	}
	for i, n := range map[int]int{8: 3, 9: 2} {
		if r := res[i]; r.Error != "" || r.FinishReason != "length" || len(r.GeneratedIDs) != n {
			t.Errorf("result %d: %+v, want a run of the length asked", i, r)
		}
	}
}

// TestRunModelBatchPreempts: a batch whose requests together reach past
// the KV cache (each fits alone) preempts some and re-prefills them, says
// so at the end, and gives the tokens of a run whose cache holds them all.
func TestRunModelBatchPreempts(t *testing.T) {
	in := writeBatch(t,
		`{"token_ids": [5, 6, 7], "max_new_tokens": 40, "ignore_eos": true}`,
		`{"token_ids": [9, 8, 7, 6], "max_new_tokens": 40, "ignore_eos": true}`,
		`{"token_ids": [3, 4], "max_new_tokens": 40, "temperature": 0.8, "seed": 7, "ignore_eos": true}`,
		`{"token_ids": [11, 12, 13, 14, 15], "max_new_tokens": 40, "ignore_eos": true}`,
	)
	results := func(kv string) ([]batchResult, string) {
		out := filepath.Join(t.TempDir(), "results.jsonl")
		code, _, errOut := run(t, "run-model", "--batch-file", in, "--out", out, "--kv-cache", kv)
		if code != 0 {
			t.Fatalf("--kv-cache %s: exit %d, %s", kv, code, errOut)
		}
		return readResults(t, out), errOut
	}
	small, errSmall := results("160KiB")
	roomy, errRoomy := results("4MiB")
	if !strings.Contains(errSmall, "preemptions") || strings.Contains(errRoomy, "preemptions") {
		t.Errorf("preemptions reported with the small cache: %q; with the roomy one: %q", errSmall, errRoomy)
	}
	for i := range roomy {
		if !slices.Equal(small[i].GeneratedIDs, roomy[i].GeneratedIDs) || len(roomy[i].GeneratedIDs) != 40 {
			t.Errorf("request %d: %v preempted, %v not", i, small[i].GeneratedIDs, roomy[i].GeneratedIDs)
		}
	}
}

// TestRunModelBatchSwapSpace: a batch whose requests outgrow a KV cache of
// 5 blocks is preempted; by default on the CPU (and with --swap-space
// given) preempted requests are swapped out, with --swap-space 0 they are
// re-prefilled; the summary says which, and the tokens are the same.
func TestRunModelBatchSwapSpace(t *testing.T) {
	in := writeBatch(t,
		`{"token_ids": [5, 6, 7], "max_new_tokens": 40, "ignore_eos": true}`,
		`{"token_ids": [8, 9, 10], "max_new_tokens": 40, "ignore_eos": true}`,
		`{"token_ids": [11, 12], "max_new_tokens": 40, "temperature": 0.9, "seed": 3, "ignore_eos": true}`,
	)
	var first []batchResult
	for _, c := range []struct {
		flags []string
		want  string
	}{
		{nil, " swapped out to host memory, 0 re-prefilled"},
		{[]string{"--swap-space", "1MiB"}, " swapped out to host memory, 0 re-prefilled"},
		{[]string{"--swap-space", "0"}, "(0 swapped out to host memory,"},
	} {
		out := filepath.Join(t.TempDir(), "results.jsonl")
		args := append([]string{"run-model", "--batch-file", in, "--out", out, "--kv-cache", "160KiB"}, c.flags...)
		code, _, errOut := run(t, args...)
		if code != 0 || !strings.Contains(errOut, "preemptions (") || !strings.Contains(errOut, c.want) {
			t.Fatalf("%v: exit %d, stderr %q; want preemptions reported with %q", c.flags, code, errOut, c.want)
		}
		if strings.Contains(c.want, "0 re-prefilled") && strings.Contains(errOut, "(0 swapped") {
			t.Errorf("%v: no swap: %q", c.flags, errOut)
		}
		res := readResults(t, out)
		if first == nil {
			first = res
			continue
		}
		for i := range res {
			if !slices.Equal(res[i].GeneratedIDs, first[i].GeneratedIDs) {
				t.Errorf("%v: request %d gave %v, with the default swap space %v", c.flags, i, res[i].GeneratedIDs, first[i].GeneratedIDs)
			}
		}
	}
}

// TestRunModelBatchDecodeRate: a batch of one request reports its decode
// rate as run-model does ("then X ms a token"), several the mean of
// theirs; FT_SCHED_GRAPH takes 0 and 1 (the CPU backend cannot capture,
// so no step replays a graph and the tokens are the same) and nothing
// else.
func TestRunModelBatchDecodeRate(t *testing.T) {
	one := writeBatch(t, `{"token_ids": [5, 6, 7], "max_new_tokens": 20, "ignore_eos": true}`)
	two := writeBatch(t, `{"token_ids": [5, 6, 7], "max_new_tokens": 20, "ignore_eos": true}`,
		`{"token_ids": [8, 9], "max_new_tokens": 4, "ignore_eos": true}`)
	var ids [][]int32
	for _, v := range []string{"0", "1"} {
		t.Setenv("FT_SCHED_GRAPH", v)
		out := filepath.Join(t.TempDir(), "r.jsonl")
		code, _, errOut := run(t, "run-model", "--batch-file", one, "--out", out)
		if code != 0 || !strings.Contains(errOut, "then ") || !strings.Contains(errOut, " ms a token") || strings.Contains(errOut, "captured graph") {
			t.Fatalf("FT_SCHED_GRAPH=%s: exit %d, stderr %s", v, code, errOut)
		}
		ids = append(ids, readResults(t, out)[0].GeneratedIDs)
	}
	if len(ids[0]) != 20 || !slices.Equal(ids[0], ids[1]) {
		t.Errorf("FT_SCHED_GRAPH=0 gave %v, =1 %v", ids[0], ids[1])
	}
	t.Setenv("FT_SCHED_GRAPH", "")
	code, _, errOut := run(t, "run-model", "--batch-file", two, "--out", filepath.Join(t.TempDir(), "r.jsonl"))
	if code != 0 || !strings.Contains(errOut, "ms a token, the mean of 2 requests") {
		t.Fatalf("two requests: exit %d, stderr %s", code, errOut)
	}
	t.Setenv("FT_SCHED_GRAPH", "yes")
	code, _, errOut = run(t, "run-model", "--batch-file", one, "--out", filepath.Join(t.TempDir(), "r.jsonl"))
	if code == 0 || !strings.Contains(errOut, "FT_SCHED_GRAPH") {
		t.Errorf("FT_SCHED_GRAPH=yes: exit %d, stderr %s", code, errOut)
	}
}

// cpuBatchRows runs bench --batch sizes --json on the bundled model on the
// CPU (budgets 0 and resident, context 5, iters timed steps, no warm-up;
// more flags in extra) and returns its want rows.
func cpuBatchRows(t *testing.T, want int, sizes, iters string, extra ...string) []batchBenchRow {
	t.Helper()
	args := append([]string{"bench", "--device", "cpu", "--device-memory", "64MiB", "--budgets", "0,resident",
		"--batch", sizes, "--context", "5", "--iters", iters, "--warmup", "0", "--json"}, extra...)
	code, out, errOut := run(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	rows := batchRows(t, out)
	if len(rows) != want {
		t.Fatalf("%d rows, want %d (2 budgets × the sizes %s):\n%s", len(rows), want, sizes, out)
	}
	return rows
}

// batchRows reads bench --batch --json's output, a row a line.
func batchRows(t *testing.T, out string) []batchBenchRow {
	t.Helper()
	var rows []batchBenchRow
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r batchBenchRow
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		rows = append(rows, r)
	}
	return rows
}
