//go:build cuda

package cuda

import (
	"testing"
	"time"
)

// TestCUDASched: with FT_CUDA_SCHED set, opening the device leaves the
// primary context's scheduling bits at the asked value (its other flags
// kept), and a stream synchronize still returns; it logs the time of an
// empty synchronize under each value. Each value's device is closed before
// the next is opened, so that the primary context is made afresh with the
// value's flags (an active one keeps those it was made with); it logs
// whether the context was active before each open (another open device
// would keep it so). It puts the flags back at the end.
func TestCUDASched(t *testing.T) {
	before, _, _, err := cPrimarySched(0, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cPrimarySched(0, before&schedMask, true) })
	for _, c := range []struct {
		v    string
		bits uint32
	}{{"blocking", SchedBlocking}, {"yield", SchedYield}, {"spin", SchedSpin}, {"auto", SchedAuto}} {
		t.Setenv(SchedEnv, c.v)
		_, _, wasActive, err := cPrimarySched(0, 0, false)
		if err != nil {
			t.Fatal(err)
		}
		d := open(t, Options{})
		_, now, _, err := cPrimarySched(0, 0, false)
		if err != nil {
			t.Fatal(err)
		}
		if now&schedMask != c.bits || now&^schedMask != before&^schedMask {
			t.Fatalf("%s=%s: primary context flags %#x (before %#x): want scheduling bits %#x, the rest kept", SchedEnv, c.v, now, before, c.bits)
		}
		s := d.Compute()
		t0 := time.Now()
		for range 100 {
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("%s=%s: flags %#x (primary context active before the open: %v), empty stream synchronize %v", SchedEnv, c.v, now, wasActive, time.Since(t0)/100)
		if err := d.Close(); err != nil {
			t.Fatalf("%s=%s: close: %v", SchedEnv, c.v, err)
		}
	}
	t.Setenv(SchedEnv, "bogus")
	if _, err := Open(0); err == nil {
		t.Fatalf("%s=bogus: Open succeeded", SchedEnv)
	}
}
