package main

import (
	"strings"
	"testing"
	"time"
)

// TestParseProcStat: the aggregate cpu line's fields sum to the total and
// the eighth is steal; per-CPU lines and short lines are not it.
func TestParseProcStat(t *testing.T) {
	in := "cpu0 1 2 3 4 5 6 7 8 9 10\ncpu  100 5 50 800 10 1 2 30 0 0\nintr 5\n"
	if total, steal := parseProcStat(strings.NewReader(in)); total != 998 || steal != 30 {
		t.Fatalf("total %d, steal %d: want 998 and 30", total, steal)
	}
	if total, steal := parseProcStat(strings.NewReader("cpu 1 2 3\n")); total != 0 || steal != 0 {
		t.Fatalf("short line: %d, %d: want zeros", total, steal)
	}
}

// TestTimedLine: the trace line of the timed forwards carries each
// forward's time and the differences of the samples.
func TestTimedLine(t *testing.T) {
	a := cpuSample{at: time.Now(), total: 1000, steal: 10, nvcsw: 5, nivcsw: 7, numGC: 3, pauseNs: 1e6}
	b := cpuSample{at: time.Now(), total: 3000, steal: 50, nvcsw: 25, nivcsw: 17, numGC: 5, pauseNs: 3.5e6}
	got := timedLine(a, b, []float64{101.5, 108.25})
	want := "timed forwards 2: 101.5 108.2 ms; GC cycles 2 (pauses 2.50 ms); CPU steal 2.00% of all CPUs' time; context switches 20 voluntary, 10 involuntary"
	if got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	if s := sampleCPU(); s.at.IsZero() {
		t.Fatal("sampleCPU: no time")
	}
}
