package cudabackend

import "testing"

// TestGEMVPipeFromEnv: FT_GEMV=pipe and pipe8 pick the pipelined GEMVs;
// unset, empty and FT_GEMV's other values do not.
func TestGEMVPipeFromEnv(t *testing.T) {
	for v, want := range map[string]string{"": "", "pipe": "pipe", "pipe8": "pipe8", "bulk": "", "rowblocks": "", "pipe4": ""} {
		t.Setenv("FT_GEMV", v)
		if got := gemvPipeFromEnv(); got != want {
			t.Errorf("FT_GEMV=%q: %q, want %q", v, got, want)
		}
	}
}
