package main

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestRunModelSharded: run-model over two and four CPU devices, resident
// and streamed, prints the reference's greedy continuation; bad lists are
// usage errors naming the problem.
func TestRunModelSharded(t *testing.T) {
	data, err := os.ReadFile("../../testdata/tiny-llama/reference.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref refFile
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	for _, c := range [][]string{
		{"--device", "cpu:0,cpu:1"},
		{"--device", "cpu:0,cpu:1,cpu:2,cpu:3", "--gpu-budget", "0"},
	} {
		args := append([]string{"run-model", "--model", "../../testdata/tiny-llama", "--token-ids", joinInts(ref.GreedyPrompt),
			"--max-new-tokens", "20", "--json"}, c...)
		code, out, errOut := run(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d, stderr %s", c, code, errOut)
		}
		var got struct {
			GeneratedIDs []int32 `json:"generated_ids"`
			Device       string  `json:"device"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("%v: %v\n%s", c, err, out)
		}
		if !slices.Equal(got.GeneratedIDs, ref.GreedyContinuation) || got.Device != "cpu:0" {
			t.Fatalf("%v: generated %v on %s, want %v", c, got.GeneratedIDs, got.Device, ref.GreedyContinuation)
		}
	}
	for list, want := range map[string]string{
		"cpu:0,cpu:0":       "names cpu:0 twice",
		"cpu:0,cpu:1,cpu:2": "4 attention heads do not split evenly over 3 devices",
		"cpu:0,gpu:1":       "unknown device",
	} {
		code, _, errOut := run(t, "run-model", "--token-ids", "1,2", "--device", list)
		if code == 0 || !strings.Contains(errOut, want) {
			t.Errorf("--device %s: exit %d, stderr %q; want an error with %q", list, code, errOut, want)
		}
	}
}

// TestBenchSharded: bench over two CPU devices reports each device's plan
// and the aggregate rate for a streamed budget.
func TestBenchSharded(t *testing.T) {
	code, out, errOut := run(t, "bench", "--device", "cpu:0,cpu:1", "--budgets", "0,resident", "--context", "16", "--iters", "2", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 JSON rows, got %q", out)
	}
	var row benchRow
	if err := json.Unmarshal([]byte(lines[0]), &row); err != nil {
		t.Fatal(err)
	}
	if len(row.Devices) != 2 || row.Devices[1].Device != "cpu:1" || row.StreamedUnits != 8 ||
		row.Devices[0].StreamedBytes+row.Devices[1].StreamedBytes != row.StreamedBytes || row.AggregateGBps <= 0 {
		t.Errorf("budget 0 row: %+v", row)
	}
	if err := json.Unmarshal([]byte(lines[1]), &row); err != nil {
		t.Fatal(err)
	}
	if row.Budget != "resident" || row.MeasuredMs <= 0 {
		t.Errorf("resident row: %+v", row)
	}
}
