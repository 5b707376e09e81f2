package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/offload"
)

// parseBenchBudget: a zero budget in any unit is the minimum, anything
// else is the parsed budget; garbage is a usage error naming --budgets.
func TestParseBenchBudget(t *testing.T) {
	for _, c := range []struct {
		in    string
		want  offload.Budget
		isMin bool
	}{
		{"0", offload.Budget{}, true}, {"0GiB", offload.Budget{}, true}, {"0B", offload.Budget{}, true}, {" 0 MiB", offload.Budget{}, true},
		{"8GiB", offload.Budget{Bytes: 8 << 30}, false}, {"0.25", offload.Budget{Fraction: 0.25}, false}, {"1B", offload.Budget{Bytes: 1}, false},
	} {
		b, isMin, err := parseBenchBudget(c.in)
		if err != nil || b != c.want || isMin != c.isMin {
			t.Errorf("%q: %+v min %v err %v; want %+v min %v", c.in, b, isMin, err, c.want, c.isMin)
		}
	}
	_, _, err := parseBenchBudget("lots")
	if _, ok := err.(usageError); !ok || !strings.Contains(err.Error(), "--budgets") {
		t.Errorf("garbage: %v (%T), want a usage error naming --budgets", err, err)
	}
}

// TestBenchBudgetZeroUnits: bench --budgets 0GiB and 0B stream every
// layer (the minimum, as "0"), not "no budget" (the whole device, where
// the tiny model would stay resident).
func TestBenchBudgetZeroUnits(t *testing.T) {
	code, out, errOut := run(t, "bench", "--device", "cpu", "--device-memory", "64MiB", "--budgets", "0,0GiB,0B,32MiB",
		"--context", "4", "--iters", "1", "--warmup", "0", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rows []benchRow
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r benchRow
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		rows = append(rows, r)
	}
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4:\n%s", len(rows), out)
	}
	for _, r := range rows[:3] {
		if r.ResidentUnits != 0 || r.StreamedUnits == 0 || r.BudgetBytes != rows[0].BudgetBytes {
			t.Errorf("budget %q: %d resident, %d streamed, %d budget bytes; want every layer streamed under %d bytes as budget 0",
				r.Budget, r.ResidentUnits, r.StreamedUnits, r.BudgetBytes, rows[0].BudgetBytes)
		}
	}
	if r := rows[3]; r.StreamedUnits != 0 {
		t.Errorf("32MiB: %d streamed, want the tiny model resident", r.StreamedUnits)
	}
}
