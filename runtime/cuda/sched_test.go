package cuda

import (
	"strings"
	"testing"
)

// TestParseSched: each FT_CUDA_SCHED value maps to its CU_CTX_SCHED_* bits,
// unset changes nothing, and anything else is an error naming the switch.
func TestParseSched(t *testing.T) {
	for _, c := range []struct {
		v     string
		flags uint32
		set   bool
	}{{"", 0, false}, {"auto", 0, true}, {"spin", 1, true}, {"yield", 2, true}, {"blocking", 4, true}} {
		f, set, err := ParseSched(c.v)
		if err != nil || f != c.flags || set != c.set {
			t.Errorf("%q: %#x, %v, %v: want %#x, %v", c.v, f, set, err, c.flags, c.set)
		}
	}
	if _, _, err := ParseSched("busy"); err == nil || !strings.Contains(err.Error(), "FT_CUDA_SCHED") || !strings.Contains(err.Error(), "busy") {
		t.Errorf("busy: error %v, want one naming FT_CUDA_SCHED and the value", err)
	}
	// The scheduling bits are replaced, the context's other flags kept
	// (0x10: CU_CTX_LMEM_RESIZE_TO_MAX).
	if got := withSched(0x10|SchedSpin, SchedBlocking); got != 0x10|SchedBlocking {
		t.Errorf("withSched(0x11, blocking) = %#x, want 0x14", got)
	}
	t.Setenv(SchedEnv, "yield")
	if f, set, err := schedFromEnv(); f != SchedYield || !set || err != nil {
		t.Errorf("FT_CUDA_SCHED=yield: %#x, %v, %v", f, set, err)
	}
}
