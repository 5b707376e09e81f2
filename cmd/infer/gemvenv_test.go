package main

import (
	"strings"
	"testing"
)

// TestGEMVEnv: checkEnv takes FT_GEMV's modes, "mixed" among them, and
// rejects other values, listing the valid ones.
func TestGEMVEnv(t *testing.T) {
	for _, v := range []string{"", "pipe", "persist", "mixed", "bal", "bal2"} {
		t.Setenv("FT_GEMV", v)
		if err := checkEnv(); err != nil {
			t.Errorf("FT_GEMV=%q: %v", v, err)
		}
	}
	t.Setenv("FT_GEMV", "mix")
	err := checkEnv()
	if err == nil || !strings.Contains(err.Error(), "FT_GEMV") || !strings.Contains(err.Error(), "mixed") {
		t.Fatalf("FT_GEMV=mix: err %v, want one naming the variable and its values", err)
	}
}
