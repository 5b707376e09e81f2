package host

import (
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// TestHostGBpsEnv: FT_HOST_GBPS=N makes the backend report N GB/s as its
// GEMV rate (what the offload engine then plans with instead of timing);
// unset reports 0 (the engine measures); a malformed value fails New
// naming the switch.
func TestHostGBpsEnv(t *testing.T) {
	dev := runtime.NewCPU(0)
	defer dev.Close()
	for v, want := range map[string]float64{"": 0, "0": 0, "97.5": 97.5e9} {
		t.Setenv(HostGBpsEnv, v)
		b, err := New(dev, Options{Threads: 1})
		if err != nil {
			t.Fatalf("%s=%q: %v", HostGBpsEnv, v, err)
		}
		if got := b.HostBandwidth(); got != want {
			t.Errorf("%s=%q: HostBandwidth %g, want %g", HostGBpsEnv, v, got, want)
		}
		b.Close()
	}
	for _, v := range []string{"fast", "-1", "NaN", "Inf", "2e6"} {
		t.Setenv(HostGBpsEnv, v)
		if b, err := New(dev, Options{Threads: 1}); err == nil || !strings.Contains(err.Error(), HostGBpsEnv) || !strings.Contains(err.Error(), "to 1e6") {
			if b != nil {
				b.Close()
			}
			t.Errorf("%s=%q: New error %v, want one naming the switch and its range up to 1e6", HostGBpsEnv, v, err)
		}
	}
}
