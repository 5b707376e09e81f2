package cuda

import (
	"slices"
	"strings"
	"testing"
)

// TestSourceBulkGEMV: the bulk-copy GEMV unit starts with common.cuh, holds
// the kernels kernels/cudabackend/bulkgemv.go looks up (each with a doc
// comment), and neither Source nor SourceSM90a holds them.
func TestSourceBulkGEMV(t *testing.T) {
	src := SourceBulkGEMV()
	if !strings.HasPrefix(src, "// Helpers shared") {
		t.Fatalf("SourceBulkGEMV does not start with common.cuh: %q", src[:40])
	}
	names := KernelsBulkGEMV()
	for _, want := range []string{"gemv_bulk_bf16", "gemv_bulk_f32out", "gemv_bulk_f32acc", "gemv_bulk_gateup_silu", "bw_read_vec", "bw_read_bulk"} {
		if !slices.Contains(names, want) {
			t.Errorf("kernel %s missing from SourceBulkGEMV (have %v)", want, names)
		}
		if slices.Contains(Kernels(), want) || slices.Contains(KernelsSM90a(), want) {
			t.Errorf("kernel %s is also in Source or SourceSM90a", want)
		}
	}
	if strings.Contains(Source(), "mbarrier::complete_tx") {
		t.Error("Source holds bulk copies into shared memory, which CUDA 11.8's NVRTC does not take")
	}
	lines := strings.Split(src, "\n")
	for i, line := range lines {
		if strings.HasPrefix(line, "extern \"C\" __global__") && (i == 0 || !strings.HasPrefix(lines[i-1], "//")) {
			t.Errorf("kernel at line %d has no doc comment: %s", i+1, line)
		}
	}
}
