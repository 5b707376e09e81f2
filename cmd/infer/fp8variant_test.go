package main

import (
	"strings"
	"testing"
)

// TestFP8VariantEnv: checkEnv takes FT_FP8_VARIANT empty, "auto" (the
// default: a variant per kind of GEMV and width) or naming a compiled
// variant and rejects other values, listing the valid ones.
func TestFP8VariantEnv(t *testing.T) {
	for _, v := range []string{"", "auto", "u8r1s", "u8r1g", "u16r2s", "u4r1s", "p4s"} {
		t.Setenv("FT_FP8_VARIANT", v)
		if err := checkEnv(); err != nil {
			t.Errorf("FT_FP8_VARIANT=%q: %v", v, err)
		}
	}
	t.Setenv("FT_FP8_VARIANT", "u32r1s")
	err := checkEnv()
	if err == nil || !strings.Contains(err.Error(), "FT_FP8_VARIANT") || !strings.Contains(err.Error(), "u8r1g") || !strings.Contains(err.Error(), "auto") {
		t.Fatalf("FT_FP8_VARIANT=u32r1s: err %v, want one naming the variable and the variants", err)
	}
}
