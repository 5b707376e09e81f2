package kernels

import (
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// TestParseL2PrefetchPlan: the FT_L2_PREFETCH spellings, String's round
// trip, and a clear error for anything else.
func TestParseL2PrefetchPlan(t *testing.T) {
	for s, want := range map[string]L2PrefetchPlan{"": L2PrefetchOff, "0": L2PrefetchOff, "o": L2PrefetchO, "all": L2PrefetchAll} {
		got, err := ParseL2PrefetchPlan(s)
		if err != nil || got != want {
			t.Errorf("ParseL2PrefetchPlan(%q) = %v, %v; want %v", s, got, err, want)
		}
		if back, err := ParseL2PrefetchPlan(got.String()); err != nil || back != got {
			t.Errorf("ParseL2PrefetchPlan(%v.String()) = %v, %v", got, back, err)
		}
	}
	if _, err := ParseL2PrefetchPlan("qkv"); err == nil || !strings.Contains(err.Error(), `"qkv"`) {
		t.Errorf("ParseL2PrefetchPlan(\"qkv\"): error %v, want one naming the value", err)
	}
}

// TestCheckPrefetchL2: a tensor on another device, a negative byte count,
// one past the tensor's end and no tensor are refused; 0 and the whole
// tensor are fine.
func TestCheckPrefetchL2(t *testing.T) {
	d1, d2 := runtime.NewCPUNamed("cpu-a", 0), runtime.NewCPUNamed("cpu-b", 0)
	x, err := runtime.NewTensor(d1, runtime.BF16, runtime.Shape{3, 5}, "x")
	if err != nil {
		t.Fatal(err)
	}
	defer x.Buffer().Free()
	for _, n := range []int64{0, 1, 29, 30} {
		if err := CheckPrefetchL2(d1, x, n); err != nil {
			t.Errorf("%d bytes: %v", n, err)
		}
	}
	for _, bad := range []struct {
		dev runtime.Device
		t   *runtime.Tensor
		n   int64
	}{{d1, x, -1}, {d1, x, 31}, {d2, x, 2}, {d1, nil, 0}} {
		if err := CheckPrefetchL2(bad.dev, bad.t, bad.n); err == nil {
			t.Errorf("%s, %d bytes: no error", bad.dev.Name(), bad.n)
		}
	}
}
