package session

import (
	"errors"
	"testing"

	"github.com/flextensor-go/flextensor/offload"
)

// TestHostPlacementOptions: HostPlacement under a budget sets the session's
// host backend as the offload engine's (a forward runs and the plan may use
// it); a negative HostThreads, HostThreads without HostPlacement, host
// placement without an offloaded model and host placement over several
// devices are ErrBadOptions.
func TestHostPlacementOptions(t *testing.T) {
	s, err := Open("", "cpu", Options{GPUBudget: "0", HostPlacement: true, HostThreads: 1})
	if err != nil {
		t.Fatal(err)
	}
	if s.HostBackend == nil || s.Manager == "" {
		t.Fatalf("host backend %v, manager %q", s.HostBackend, s.Manager)
	}
	c, err := s.Model.NewKVCache(s.Backend, 8)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ { // past discovery and profiling into INFERENCE
		if _, err := s.Model.Forward(s.Backend, c, []int32{1, 2}, false); err != nil {
			t.Fatal(err)
		}
	}
	c.Free()
	if bw := offload.GetOffloadManager(s.Manager).HostBandwidth(); bw <= 0 {
		t.Errorf("the engine measured no host bandwidth (%g): the host backend is not its Config.HostBackend", bw)
	}
	// Forwards of two tokens: the estimate also timed the host's products
	// of two rows.
	if r := offload.GetOffloadManager(s.Manager).HostProductRate(2); r <= 0 {
		t.Errorf("the engine timed no 2-token host products (%g)", r)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dev  string
		opts Options
	}{
		{"cpu", Options{GPUBudget: "0", HostPlacement: true, HostThreads: -1}},
		{"cpu", Options{GPUBudget: "0", HostThreads: 2}},
		{"cpu", Options{HostPlacement: true}},
		{"cpu:0,cpu:1", Options{GPUBudget: "0", HostPlacement: true}},
	} {
		if s, err := Open("", c.dev, c.opts); !errors.Is(err, ErrBadOptions) {
			s.Close()
			t.Errorf("%s %+v: %v, want ErrBadOptions", c.dev, c.opts, err)
		}
	}
}
