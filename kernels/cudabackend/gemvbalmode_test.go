package cudabackend

import "testing"

// TestGEMVBalFromEnv: FT_GEMV=bal2 and bal4 turn the split-K GEMVs on with
// 2 and 4 segments a row, FT_GEMV=bal with the split chosen per product, and keep the pipelined GEMVs under them (the LM
// head's and odd widths' kernels); other values, including splits the
// kernels do not come in, leave them off.
func TestGEMVBalFromEnv(t *testing.T) {
	for v, want := range map[string]int{"": 0, "pipe": 0, "persist": 0, "bal2": 2, "bal4": 4, "bal3": 0, "bal8": 0, "bal": gemvBalAuto, "balx": 0, "rowblocks": 0} {
		t.Setenv("FT_GEMV", v)
		if got := gemvBalFromEnv(); got != want {
			t.Errorf("FT_GEMV=%q: split %d, want %d", v, got, want)
		}
		pipe := ""
		if v == "" || v == "pipe" || want != 0 {
			pipe = "pipe"
		}
		if got := gemvPipeFromEnv(); got != pipe {
			t.Errorf("FT_GEMV=%q: pipelined depth %q, want %q", v, got, pipe)
		}
	}
}
