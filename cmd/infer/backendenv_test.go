package main

import (
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/kernels/cudabackend"
)

// TestBackendSwitchesMatch: the values checkEnv lets through for the CUDA
// backend's simple switches are the values the backend's start-up check
// takes (cudabackend.EnvSwitchValues), so neither accepts what the other
// rejects; the integer switches are in extraEnv too.
func TestBackendSwitchesMatch(t *testing.T) {
	for name, values := range cudabackend.EnvSwitchValues() {
		allowed, ok := extraEnv[name]
		if !ok {
			t.Errorf("%s: the backend reads it, extraEnv does not list it", name)
			continue
		}
		if values == nil {
			continue
		}
		a, b := slices.Sorted(slices.Values(allowed)), slices.Sorted(slices.Values(values))
		if !slices.Equal(a, b) {
			t.Errorf("%s: extraEnv takes %q, the backend %q", name, a, b)
		}
	}
	if !slices.Equal(extraEnv["FT_GEMV"], cudabackend.GEMVValues()) {
		t.Errorf("FT_GEMV: extraEnv takes %q, the backend %q", extraEnv["FT_GEMV"], cudabackend.GEMVValues())
	}
}
