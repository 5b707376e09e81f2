package cudabackend

import (
	"strings"
	"testing"

	kcuda "github.com/flextensor-go/flextensor/kernels/cuda"
)

// TestGemmFusedDefines: FT_FUSED_GROUP's value reaches the fused GEMMs'
// source as a GS_GM definition ahead of it (none for 0, the file's own),
// and the file defines GS_GM only where none came before it.
func TestGemmFusedDefines(t *testing.T) {
	if got := gemmFusedDefines(0); got != "" {
		t.Errorf("group 0: %q, want nothing", got)
	}
	if got := gemmFusedDefines(32); got != "#define GS_GM 32\n" {
		t.Errorf("group 32: %q", got)
	}
	src, err := kcuda.SourceSM90aExtra(gemmFusedFile)
	if err != nil {
		t.Fatal(err)
	}
	i, j := strings.Index(src, "#ifndef GS_GM"), strings.Index(src, "#define GS_GM 16")
	if i < 0 || j < i {
		t.Errorf("%s: GS_GM's default is not guarded by #ifndef GS_GM", gemmFusedFile)
	}
	if err := checkEnvSwitch("FT_FUSED_GROUP", "x"); err == nil {
		t.Error(`FT_FUSED_GROUP="x" accepted`)
	}
}
