package cudabackend

import (
	"strings"
	"testing"
)

// TestGEMMModeEnv: FT_GEMM's values, the default, and a bad one named.
func TestGEMMModeEnv(t *testing.T) {
	for s, want := range map[string]GEMMMode{"": GEMMTuned, "lt": GEMMTuned, "lt-sustained": GEMMTunedSustained, "cublas": GEMMCublas} {
		got, err := ParseGEMMMode(s)
		if err != nil || got != want {
			t.Errorf("ParseGEMMMode(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	if _, err := ParseGEMMMode("cublaslt"); err == nil || !strings.Contains(err.Error(), "FT_GEMM") {
		t.Errorf("a bad FT_GEMM: %v, want an error naming FT_GEMM", err)
	}
	t.Setenv("FT_GEMM", "cublas")
	if m, err := gemmModeFromEnv(); err != nil || m != GEMMCublas {
		t.Errorf("FT_GEMM=cublas: %v, %v", m, err)
	}
	t.Setenv("FT_GEMM", "fast")
	if _, err := gemmModeFromEnv(); err == nil {
		t.Error("FT_GEMM=fast: no error")
	}
	for _, m := range []GEMMMode{GEMMTuned, GEMMCublas, GEMMTunedSustained} {
		if back, err := ParseGEMMMode(m.String()); err != nil || back != m {
			t.Errorf("%v: its name parses to %v, %v", m, back, err)
		}
	}
}
