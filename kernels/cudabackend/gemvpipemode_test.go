package cudabackend

import "testing"

// TestGEMVPipeFromEnv: unset or empty FT_GEMV, FT_GEMV=pipe and
// FT_GEMV=mixed (q/k/v apart) pick the pipelined GEMVs at depth pipe; persist and FT_GEMV's other values pick
// none.
func TestGEMVPipeFromEnv(t *testing.T) {
	for v, want := range map[string]string{"": "pipe", "pipe": "pipe", "mixed": "pipe", "persist": "", "rowblocks": "", "pipe4": ""} {
		t.Setenv("FT_GEMV", v)
		if got := gemvPipeFromEnv(); got != want {
			t.Errorf("FT_GEMV=%q: %q, want %q", v, got, want)
		}
	}
}
