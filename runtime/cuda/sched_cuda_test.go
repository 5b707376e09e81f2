//go:build cuda

package cuda

import (
	"testing"
	"time"
)

// TestCUDASched: with FT_CUDA_SCHED set, opening the device leaves the
// primary context's scheduling bits at the asked value (its other flags
// kept), and a stream synchronize still returns; it logs the time of an
// empty synchronize under each value. It puts the flags back at the end.
func TestCUDASched(t *testing.T) {
	before, _, err := cPrimarySched(0, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cPrimarySched(0, before&schedMask, true) })
	for _, c := range []struct {
		v    string
		bits uint32
	}{{"blocking", SchedBlocking}, {"yield", SchedYield}, {"spin", SchedSpin}, {"auto", SchedAuto}} {
		t.Setenv(SchedEnv, c.v)
		d := open(t, Options{})
		_, now, err := cPrimarySched(0, 0, false)
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
		t.Logf("%s=%s: flags %#x, empty stream synchronize %v", SchedEnv, c.v, now, time.Since(t0)/100)
	}
	t.Setenv(SchedEnv, "bogus")
	if _, err := Open(0); err == nil {
		t.Fatalf("%s=bogus: Open succeeded", SchedEnv)
	}
}
