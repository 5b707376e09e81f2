package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestBenchMoE: bench runs a mixture-of-experts model resident (decode)
// and batched, like a dense one.
func TestBenchMoE(t *testing.T) {
	for _, fixture := range []string{"tiny-mixtral", "tiny-qwen3moe"} {
		dir := "../../testdata/" + fixture
		code, out, errOut := run(t, "bench", "--model", dir, "--device", "cpu", "--budgets", "resident", "--mode", "decode",
			"--context", "12", "--iters", "3", "--warmup", "1")
		if code != 0 || !strings.Contains(out, "resident") {
			t.Fatalf("%s: exit %d, stdout %q, stderr %q", fixture, code, out, errOut)
		}
		code, out, errOut = run(t, "bench", "--model", dir, "--device", "cpu", "--budgets", "resident", "--batch", "1,3",
			"--context", "5", "--iters", "2", "--warmup", "0", "--json")
		if code != 0 {
			t.Fatalf("%s --batch: exit %d: %s", fixture, code, errOut)
		}
		if n := len(strings.Split(strings.TrimSpace(out), "\n")); n != 2 {
			t.Fatalf("%s --batch: %d rows, want 2:\n%s", fixture, n, out)
		}
		var r batchBenchRow
		if err := json.Unmarshal([]byte(strings.Split(out, "\n")[1]), &r); err != nil || r.Batch != 3 || r.TokensPerSec <= 0 {
			t.Errorf("%s --batch: row %+v, %v", fixture, r, err)
		}
	}
}
