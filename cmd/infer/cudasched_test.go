package main

import (
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// TestCUDASchedValues: every value infer lets through FT_CUDA_SCHED is one
// runtime/cuda accepts, and infer rejects the rest by name.
func TestCUDASchedValues(t *testing.T) {
	for _, v := range cudaSchedValues {
		if _, _, err := cuda.ParseSched(v); err != nil {
			t.Errorf("FT_CUDA_SCHED=%q: infer accepts it, runtime/cuda does not: %v", v, err)
		}
	}
	t.Setenv("FT_CUDA_SCHED", "busy")
	if code, _, errOut := run(t, "bench-host", "--read-mib", "1", "--reps", "1", "--shapes", "o", "--kinds", "bf16", "--tokens", "1"); code != 2 || !strings.Contains(errOut, "FT_CUDA_SCHED") {
		t.Fatalf("FT_CUDA_SCHED=busy: exit %d, stderr %q: want 2 naming the variable", code, errOut)
	}
}
