package cudabackend

import (
	"slices"
	"strings"
	"testing"
)

// TestFP8VariantFromEnv: unset or empty picks the default, every listed
// variant is accepted, anything else is an error naming the variable.
func TestFP8VariantFromEnv(t *testing.T) {
	t.Setenv("FT_FP8_VARIANT", "")
	if v, err := fp8VariantFromEnv(); err != nil || v != fp8DefaultVariant {
		t.Fatalf("empty: %q, %v; want %q", v, err, fp8DefaultVariant)
	}
	names := FP8VariantNames()
	if len(names) != len(fp8Variants) || names[0] != fp8DefaultVariant {
		t.Fatalf("FP8VariantNames %v: want the %d variants, the default %q first", names, len(fp8Variants), fp8DefaultVariant)
	}
	for _, v := range fp8Variants {
		if !slices.Contains(names, v.Name) {
			t.Errorf("FP8VariantNames lacks %q", v.Name)
		}
		t.Setenv("FT_FP8_VARIANT", v.Name)
		if got, err := fp8VariantFromEnv(); err != nil || got != v.Name {
			t.Errorf("%s: %q, %v", v.Name, got, err)
		}
	}
	t.Setenv("FT_FP8_VARIANT", "u32r1s")
	if _, err := fp8VariantFromEnv(); err == nil || !strings.Contains(err.Error(), "FT_FP8_VARIANT") {
		t.Fatalf("unknown variant: err %v, want one naming FT_FP8_VARIANT", err)
	}
}
