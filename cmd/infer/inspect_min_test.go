package main

import (
	"strings"
	"testing"
)

// TestInspectMinBudget: inspect --gpu-budget 0 (any unit) previews the plan
// under the minimum budget (Footprint.Min), says so, and says the token
// embedding table stays in mapped host memory; a budget holding every
// layer names no mapped table.
func TestInspectMinBudget(t *testing.T) {
	var zero string
	for _, b := range []string{"0", "0GiB"} {
		code, out, errOut := run(t, "inspect", "--gpu-budget", b)
		if code != 0 {
			t.Fatalf("--gpu-budget %s: exit %d: %s", b, code, errOut)
		}
		line := ""
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "budget ") {
				line = l
			}
		}
		for _, want := range []string{"(the minimum): 0 of ", "token embedding table in mapped host memory"} {
			if !strings.Contains(line, want) {
				t.Errorf("--gpu-budget %s: budget line %q lacks %q", b, line, want)
			}
		}
		if zero == "" {
			zero = line
		} else if line != zero {
			t.Errorf("--gpu-budget %s: %q, want the same preview as 0: %q", b, line, zero)
		}
	}
	code, out, errOut := run(t, "inspect", "--gpu-budget", "1GiB")
	if code != 0 || strings.Contains(out, "minimum") || strings.Contains(out, "table in mapped host memory") {
		t.Errorf("--gpu-budget 1GiB: exit %d, %q, %q", code, out, errOut)
	}
}
