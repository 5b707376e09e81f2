package cudabackend

import "testing"

// TestGEMVMixedFromEnv: FT_GEMV=mixed keeps q/k/v on gemv.cu's kernel with
// the pipelined GEMVs for the rest (GEMVPersistQKV, GEMVPipe "pipe", no
// split-K); unset or empty follows gemvMixedDefault with the pipelined
// GEMVs; every other value (pipe, persist, bal…, near misses) leaves
// GEMVPersistQKV off, so FT_GEMV=pipe gives the pipelined GEMVs everywhere
// whatever the default.
func TestGEMVMixedFromEnv(t *testing.T) {
	for v, want := range map[string]bool{"": gemvMixedDefault, "mixed": true, "pipe": false, "persist": false,
		"rowblocks": false, "bal": false, "bal2": false, "Mixed": false, "mixed ": false} {
		t.Setenv("FT_GEMV", v)
		if got := gemvMixedFromEnv(); got != want {
			t.Errorf("FT_GEMV=%q: q/k/v on gemv.cu's kernel %v, want %v", v, got, want)
		}
	}
	t.Setenv("FT_GEMV", "mixed")
	if got := gemvPipeFromEnv(); got != "pipe" {
		t.Errorf("FT_GEMV=mixed: pipelined depth %q, want pipe (the GEMVs other than q/k/v)", got)
	}
	if got := gemvBalFromEnv(); got != 0 {
		t.Errorf("FT_GEMV=mixed: split-K %d, want 0 (off)", got)
	}
}
