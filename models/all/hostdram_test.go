package all_test

import (
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/offload"
)

// plainHost is a host backend that does not measure the host's DRAM read
// bandwidth (no offload.HostReadMeasurer): kernels/host's backend behind
// the kernels.Backend interface alone, with slowHost's GEMV figure.
type plainHost struct{ kernels.Backend }

func (plainHost) HostBandwidth() float64 { return 1 }

// TestHostDRAMSetting: the shared-read model's DRAM figure comes from
// FT_HOST_DRAM_GBPS through the host backend and nowhere else: a malformed
// value is an error from the forward naming the variable (it used to be
// traced and the GEMV figure used, turning the model on); unset it is off;
// N is N GB/s; and a host backend that does not measure leaves the model
// off whatever the variable says (no fall-back to the GEMV figure).
func TestHostDRAMSetting(t *testing.T) {
	fx := batchFixtures[0] // llama: 4 layers
	for _, c := range []struct {
		name, env string
		plain     bool
		wantGBps  float64
		wantErr   string
	}{
		{"malformed", "fast", false, 0, "FT_HOST_DRAM_GBPS"},
		{"NaN", "NaN", false, 0, "FT_HOST_DRAM_GBPS"},
		{"unset", "", false, 0, ""},
		{"set", "140", false, 140, ""},
		{"no measurer", "140", true, 0, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("FT_HOST_DRAM_GBPS", c.env)
			hostDev, _ := cpu(t)
			resident := load(t, fx.dir, hostDev)
			dev, cb := offloadDevice(t)
			defer dev.Close()
			hb := hostBackend(t)
			cfg := hybridConfig(t, resident, dev, hb, 2)
			if c.plain {
				cfg.HostBackend = plainHost{hb}
			}
			cfg.OffloadTiming = offload.TimingEager
			name := "host-dram-" + strings.ReplaceAll(c.name, " ", "-")
			m := load(t, fx.dir, hostDev)
			mgr, release := offloadAs(t, m, &cfg, name)
			defer release()
			prompt := []int32{3, 17, 42, 5}
			var runErr error
			for range 2 {
				if _, runErr = testmodel.Greedy(m, cb, prompt, 3); runErr != nil {
					break
				}
			}
			if c.wantErr != "" {
				if runErr == nil || !strings.Contains(runErr.Error(), c.wantErr) {
					t.Fatalf("FT_HOST_DRAM_GBPS=%q: error %v, want one naming %s", c.env, runErr, c.wantErr)
				}
				return
			}
			if runErr != nil {
				t.Fatal(runErr)
			}
			if len(mgr.HostUnits()) != 1 {
				t.Fatalf("host units %v, want layer 1", unitNames(mgr.HostUnits()))
			}
			if got := mgr.HostReadBandwidth(); got != c.wantGBps*1e9 {
				t.Errorf("DRAM read figure %v bytes/s, want %v", got, c.wantGBps*1e9)
			}
		})
	}
}
