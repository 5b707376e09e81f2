//go:build cuda

package main

import (
	"regexp"
	"testing"
)

// TestBenchHostDRAMProbeCUDA: bench-host --copy-device cuda:0 runs every
// phase with a GPU's copy engine (small buffers, 300 ms a phase: ~3 s)
// and logs its table; the copies alone move at least 1 GB/s.
func TestBenchHostDRAMProbeCUDA(t *testing.T) {
	code, out, errOut := run(t, "bench-host", "--copy-device", "cuda:0", "--read-mib", "512", "--copy-mib", "1024", "--copy-chunk-mib", "64",
		"--probe-ms", "300", "--layer", "--layer-scale", "4", "--layer-iters", "5", "--context", "64")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	t.Logf("\n%s", out)
	m := regexp.MustCompile(`copies alone +- +([0-9]+)\.[0-9]`).FindStringSubmatch(out)
	if m == nil || m[1] == "0" {
		t.Fatalf("no copy rate of at least 1 GB/s in the copies-alone row:\n%s", out)
	}
	if !regexp.MustCompile(`both at once: [0-9.]+ GB/s`).MatchString(out) || !regexp.MustCompile(`host layer beside the copies: [0-9.]+ ms`).MatchString(out) {
		t.Fatalf("comparison lines missing:\n%s", out)
	}
}
