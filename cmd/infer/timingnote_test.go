package main

import (
	"strings"
	"testing"
)

// TestOffloadTimingProfilingNote: --offload-timing after a run too short to
// leave profiling (the README's --max-new-tokens 2) says that its passes
// were profiling passes and how many tokens a table needs, instead of
// blaming OffloadTiming; a run past profiling prints the table.
func TestOffloadTimingProfilingNote(t *testing.T) {
	args := func(n string) []string {
		return []string{"run-model", "--gpu-budget", "0", "--device-memory", "64MiB", "--token-ids", "1,2", "--max-new-tokens", n, "--offload-timing"}
	}
	for n, want := range map[string]string{
		"1": "the one pass so far was a profiling pass; timing starts after profiling",
		"2": "the 2 passes so far were profiling passes; timing starts after profiling (3 passes: 1 discovery, 2 profiling), so generate more than 3 tokens",
		"3": "the 3 passes so far were profiling passes",
	} {
		code, _, e := run(t, args(n)...)
		if code != 0 || !strings.Contains(e, want) || strings.Contains(e, "is OffloadTiming off") {
			t.Errorf("--max-new-tokens %s: exit %d, stderr %q; want %q", n, code, e, want)
		}
	}
	code, _, e := run(t, args("6")...)
	if code != 0 || !strings.Contains(e, "per pass (average of 3)") || strings.Contains(e, "no measured passes") {
		t.Errorf("--max-new-tokens 6: exit %d, stderr %q; want a table of 3 passes", code, e)
	}
}

// TestBudgetZeroFewLayers pins what the README says of --gpu-budget 0: the
// minimum budget holds two transfer blocks of the largest layer, so a model
// of more layers than that streams every layer, while one of one or two
// layers fits whole in those bytes and stays resident.
func TestBudgetZeroFewLayers(t *testing.T) {
	for layers, want := range map[string]string{
		"1": "(the minimum): 1 of 1 units resident, 0 transfer blocks",
		"2": "(the minimum): 2 of 2 units resident, 0 transfer blocks",
		"3": "(the minimum): 0 of 3 units resident, 2 transfer blocks",
	} {
		dir := t.TempDir()
		if code, _, e := run(t, "make-model", "--shape", "deep-test", "--layers", layers, "--out", dir); code != 0 {
			t.Fatalf("make-model --layers %s: exit %d: %s", layers, code, e)
		}
		code, out, e := run(t, "inspect", "--model", dir, "--gpu-budget", "0", "--device-memory", "64MiB")
		if code != 0 || !strings.Contains(out+e, want) {
			t.Errorf("%s layers at --gpu-budget 0: exit %d, %s%s; want %q", layers, code, out, e, want)
		}
	}
}
