package cuda

import (
	"slices"
	"testing"
)

// TestMergedSources: the column-split kernels cudabackend/merged.go looks
// up are in the sources.
func TestMergedSources(t *testing.T) {
	names := Kernels()
	for _, want := range []string{"split_cols_bf16", "split_cols_bf16_v8", "silu_mul_split_bf16", "silu_mul_split_bf16_v8"} {
		if !slices.Contains(names, want) {
			t.Errorf("kernel %s missing from the sources", want)
		}
	}
}
