package host

import (
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// The offload engine finds the figure through this method
// (offload.HostReadMeasurer).
var _ interface{ HostReadBandwidth() (float64, error) } = (*Backend)(nil)

func TestHostReadBandwidth(t *testing.T) {
	b, err := New(runtime.NewCPU(0), Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	t.Setenv("FT_HOST_DRAM_GBPS", "140.5")
	if bw, err := b.HostReadBandwidth(); err != nil || bw != 140.5e9 {
		t.Fatalf("FT_HOST_DRAM_GBPS=140.5: %v, %v; want 1.405e11 bytes/s", bw, err)
	}
	t.Setenv("FT_HOST_DRAM_GBPS", "0")
	if bw, err := b.HostReadBandwidth(); err != nil || bw != 0 {
		t.Fatalf("FT_HOST_DRAM_GBPS=0: %v, %v; want 0 (model off)", bw, err)
	}
	for _, bad := range []string{"fast", "-3", "NaN", "Inf", "+Inf"} {
		t.Setenv("FT_HOST_DRAM_GBPS", bad)
		if _, err := b.HostReadBandwidth(); err == nil || !strings.Contains(err.Error(), "FT_HOST_DRAM_GBPS") {
			t.Fatalf("FT_HOST_DRAM_GBPS=%s: error %v, want one naming the variable", bad, err)
		}
	}
	t.Setenv("FT_HOST_DRAM_GBPS", "")
	if bw, err := b.HostReadBandwidth(); err != nil || bw != 0 {
		t.Fatalf("FT_HOST_DRAM_GBPS unset: %v, %v; want 0 (model off by default)", bw, err)
	}
	t.Setenv("FT_HOST_DRAM_GBPS", "measure")
	bw, err := b.HostReadBandwidth()
	if err != nil || !(bw > 1e8) {
		t.Fatalf("measured %v bytes/s, %v; want a positive rate above 0.1 GB/s", bw, err)
	}
	if again, _ := b.HostReadBandwidth(); again != bw {
		t.Fatalf("second call %v, first %v: want the figure measured once", again, bw)
	}
}
