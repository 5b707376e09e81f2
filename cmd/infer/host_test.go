package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestBenchHostThreads: bench --host-threads on the CPU device gives each
// offloaded budget a two-way row and a "+host" row next to it, each with
// predicted and measured times and a host_units count that, with the
// resident and streamed units, covers the 4 layers; "resident" gets one row.
// (The engine allows host placement with a CPU main device: the host
// kernels run on a CPU device of their own, TestHostPlacement's set-up.)
func TestBenchHostThreads(t *testing.T) {
	code, out, errOut := run(t, "bench", "--model", "../../testdata/tiny-llama", "--device", "cpu", "--device-memory", "64MiB",
		"--budgets", "0,1MiB,resident", "--context", "16", "--iters", "2", "--host-threads", "1", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	type row struct {
		Budget        string  `json:"budget"`
		ResidentUnits int     `json:"resident_units"`
		StreamedUnits int     `json:"streamed_units"`
		HostUnits     *int    `json:"host_units"`
		PredictedMs   float64 `json:"predicted_ms"`
		MeasuredMs    float64 `json:"measured_ms"`
	}
	var rows []row
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var r row
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("%v: %q", err, l)
		}
		rows = append(rows, r)
	}
	var budgets []string
	for _, r := range rows {
		budgets = append(budgets, r.Budget)
	}
	if want := []string{"0", "0+host", "1MiB", "1MiB+host", "resident"}; !slices.Equal(budgets, want) {
		t.Fatalf("rows for budgets %q, want %q", budgets, want)
	}
	for _, r := range rows[:4] {
		if r.HostUnits == nil {
			t.Fatalf("row %s has no host_units", r.Budget)
		}
		if n := r.ResidentUnits + r.StreamedUnits + *r.HostUnits; n != 4 || r.PredictedMs <= 0 || r.MeasuredMs <= 0 {
			t.Errorf("row %s: %d resident + %d streamed + %d host units (want 4 layers), predicted %g ms, measured %g ms",
				r.Budget, r.ResidentUnits, r.StreamedUnits, *r.HostUnits, r.PredictedMs, r.MeasuredMs)
		}
		if !strings.HasSuffix(r.Budget, "+host") && *r.HostUnits != 0 {
			t.Errorf("two-way row %s has %d host units", r.Budget, *r.HostUnits)
		}
	}
	code, out, errOut = run(t, "bench", "--device-memory", "64MiB", "--budgets", "0", "--context", "16", "--iters", "1", "--host-threads", "1")
	if code != 0 || !strings.Contains(out, "0+host") || !strings.Contains(out, " host ") {
		t.Fatalf("bench table: exit %d, %q, %q", code, out, errOut)
	}
}

// TestRunModelHostThreads: run-model with --host-threads (flag or
// FT_HOST_THREADS) under a budget of 0 generates the reference greedy
// continuation, and its --offload-timing table has the host column.
func TestRunModelHostThreads(t *testing.T) {
	data, _ := os.ReadFile("../../testdata/tiny-llama/reference.json")
	var ref refFile
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	for _, env := range []bool{false, true} {
		args := []string{"run-model", "--device-memory", "64MiB", "--gpu-budget", "0", "--token-ids", joinInts(ref.GreedyPrompt),
			"--max-new-tokens", "20", "--temperature", "0", "--json"}
		if env {
			t.Setenv("FT_HOST_THREADS", "1")
		} else {
			args = append(args, "--host-threads", "0")
		}
		code, out, errOut := run(t, args...)
		if code != 0 {
			t.Fatalf("env %v: exit %d: %s", env, code, errOut)
		}
		var got struct {
			GeneratedIDs []int32  `json:"generated_ids"`
			Median       *float64 `json:"decode_ms_per_token_median"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.GeneratedIDs, ref.GreedyContinuation) {
			t.Fatalf("env %v: got %v, want %v", env, got.GeneratedIDs, ref.GreedyContinuation)
		}
		if got.Median == nil || *got.Median <= 0 {
			t.Fatalf("env %v: decode_ms_per_token_median %v, want a positive figure", env, got.Median)
		}
	}
	code, out, errOut := run(t, "run-model", "--device-memory", "64MiB", "--gpu-budget", "0", "--token-ids", "1,2,3",
		"--max-new-tokens", "4", "--offload-timing")
	if code != 0 || !strings.Contains(out+errOut, "host ms") || !strings.Contains(errOut, " ms a token (median ") {
		t.Fatalf("--offload-timing: exit %d, %q, %q", code, out, errOut)
	}
}

// TestDecodeMedian: the median gap between tokens leaves out the few slow
// steps an offloaded model's profiling and replans take, which the mean
// spreads over a short generation; fewer than two tokens give 0.
func TestDecodeMedian(t *testing.T) {
	ms := time.Millisecond
	// Steps of 300, 280 (profiling), then 10, 12, 11, 500 (a replan), 10.
	at := []time.Duration{100 * ms, 400 * ms, 680 * ms, 690 * ms, 702 * ms, 713 * ms, 1213 * ms, 1223 * ms}
	if got := decodeMedian(at); got != 12 {
		t.Errorf("median gap %g ms, want 12 (gaps 300 280 10 12 11 500 10)", got)
	}
	if got, mean := decodeMedian(at), decodePer(at[0], at[len(at)-1], len(at)); got >= mean {
		t.Errorf("median %g ms not below the mean %g ms", got, mean)
	}
	for _, short := range [][]time.Duration{nil, {5 * ms}} {
		if got := decodeMedian(short); got != 0 {
			t.Errorf("decodeMedian(%v) = %g, want 0", short, got)
		}
	}
}

// TestHostThreadsErrors: a negative count names the flag (or the
// variable); host placement without an offloaded model, with several
// devices, or in a batched run is a usage error saying why.
func TestHostThreadsErrors(t *testing.T) {
	batch := t.TempDir() + "/b.jsonl"
	if err := os.WriteFile(batch, []byte(`{"token_ids":[1,2]}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run-model", "--gpu-budget", "0", "--token-ids", "1", "--host-threads", "-1"}, "--host-threads -1 is negative"},
		{[]string{"run-model", "--gpu-budget", "0", "--token-ids", "1", "--host-threads", "many"}, `--host-threads "many"`},
		{[]string{"run-model", "--token-ids", "1", "--host-threads", "2"}, "--host-threads applies to an offloaded model only"},
		{[]string{"run-model", "--device", "cpu:0,cpu:1", "--gpu-budget", "0", "--token-ids", "1", "--host-threads", "2"}, "does not apply to several devices"},
	} {
		code, _, errOut := run(t, c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d, %q; want exit 2 and %q", c.args, code, errOut, c.want)
		}
	}
	t.Setenv("FT_HOST_THREADS", "-3")
	code, _, errOut := run(t, "run-model", "--gpu-budget", "0", "--token-ids", "1")
	if code != 2 || !strings.Contains(errOut, "FT_HOST_THREADS") || !strings.Contains(errOut, "negative") {
		t.Errorf("FT_HOST_THREADS=-3: exit %d, %q", code, errOut)
	}
}

// TestBenchBatchHost: bench --batch with --host-threads runs each offloaded
// budget twice, the two-way plan and "0+host", at batch 1 and 3: the
// two-way rows stream every layer and compute none on the host; the +host
// rows place every layer somewhere (resident, streamed or, batched forwards
// computing host layers, on the host), and with FT_BATCH_HOST=off none on
// the host.
func TestBenchBatchHost(t *testing.T) {
	args := []string{"bench", "--device", "cpu", "--device-memory", "64MiB", "--budgets", "0", "--batch", "1,3",
		"--context", "5", "--iters", "2", "--warmup", "0", "--host-threads", "2", "--json"}
	for _, off := range []bool{false, true} {
		if off {
			t.Setenv("FT_BATCH_HOST", "off")
		}
		code, out, errOut := run(t, args...)
		if code != 0 {
			t.Fatalf("FT_BATCH_HOST off %v: exit %d: %s", off, code, errOut)
		}
		rows := batchRows(t, out)
		var budgets []string
		for _, r := range rows {
			budgets = append(budgets, r.Budget)
			placed := r.ResidentUnits + r.StreamedUnits + r.HostUnits
			switch {
			case r.StepMs <= 0 || placed != rows[0].StreamedUnits:
				t.Errorf("FT_BATCH_HOST off %v: row %+v: want a step time and the %d layers placed", off, r, rows[0].StreamedUnits)
			case (r.Budget == "0" || off) && (r.HostUnits != 0 || r.StreamedUnits == 0):
				t.Errorf("FT_BATCH_HOST off %v: row %+v: want no host unit, streamed layers", off, r)
			}
		}
		if want := []string{"0", "0", "0+host", "0+host"}; !slices.Equal(budgets, want) {
			t.Fatalf("budgets %v, want %v:\n%s", budgets, want, out)
		}
	}
}

// TestRunModelBatchFileHost: run-model --batch-file takes --host-threads
// (batched forwards compute host layers): an offloaded model's greedy
// requests give the tokens they give without it.
func TestRunModelBatchFileHost(t *testing.T) {
	in := writeBatch(t,
		`{"token_ids": [5, 6, 7], "max_new_tokens": 6, "ignore_eos": true}`,
		`{"token_ids": [9, 8, 7, 6, 5, 4, 3, 2, 1, 20, 30], "max_new_tokens": 4, "ignore_eos": true}`,
		`{"token_ids": [11], "max_new_tokens": 8, "ignore_eos": true}`,
	)
	var got [][][]int32
	for _, host := range []bool{false, true} {
		out := filepath.Join(t.TempDir(), "results.jsonl")
		args := []string{"run-model", "--gpu-budget", "0", "--batch-file", in, "--out", out}
		if host {
			args = append(args, "--host-threads", "2")
		}
		code, _, errOut := run(t, args...)
		if code != 0 {
			t.Fatalf("host threads %v: exit %d: %s", host, code, errOut)
		}
		var ids [][]int32
		for _, r := range readResults(t, out) {
			if r.Error != "" || r.FinishReason != "length" {
				t.Fatalf("host threads %v: result %+v", host, r)
			}
			ids = append(ids, r.GeneratedIDs)
		}
		got = append(got, ids)
	}
	for i := range got[0] {
		if !slices.Equal(got[0][i], got[1][i]) {
			t.Errorf("request %d: %v with --host-threads, %v without", i, got[1][i], got[0][i])
		}
	}
}
