package offload

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestMakePlanAnnounced: plans with announced units (experts), each
// computed by hand in the case's comment. Copies cost 0.01 ms a byte.
func TestMakePlanAnnounced(t *testing.T) {
	curve := planPerByte(0.01 * planMs)
	dense := func(name string, bytes int64, ms float64) PlanUnit {
		return PlanUnit{Name: name, Bytes: bytes, ComputeSec: ms * planMs}
	}
	expert := func(name string, bytes int64, calls, share float64) PlanUnit {
		return PlanUnit{Name: name, Bytes: bytes, ComputeSec: 0.1 * planMs, Announced: true, Calls: calls, RunShare: share}
	}
	four := []PlanUnit{dense("d", 200, 1), expert("e0", 100, 2, 1), expert("e1", 100, 1, 1), expert("e2", 100, 0.5, 0.5), expert("e3", 100, 0, 0)}
	type want struct {
		resident            []bool
		slots, poolSlots    int
		slotBytes, poolSlot int64
		predicted, floor    float64 // ms
		miss, poolBytes     float64
		peak                int64
	}
	for _, c := range []struct {
		name string
		in   PlanInput
		want want
	}{
		{
			// 600 bytes hold everything: compute 1 + 0.1·(2+1+0.5+0) ms.
			"all fit", PlanInput{Units: four, Budget: 600, Curve: curve, MaxAnnounced: 1},
			want{resident: []bool{true, true, true, true, true}, predicted: 1.35, floor: 1.35, peak: 600},
		},
		{
			// The dense unit stays (200) beside a reserved slot (100);
			// 200 bytes are left for experts: e0 (most copies a pass)
			// resident + one slot. Streamed e1 (1 copy a pass), e2
			// (half a pass), e3 (never runs): 1.5 copies of 100 bytes,
			// 1.5 ms; compute 1 + 0.35 ms: predicted 1 + max(0.35, 1.5).
			"one resident expert", PlanInput{Units: four, Budget: 400, Curve: curve, MaxAnnounced: 1},
			want{resident: []bool{true, true, false, false, false}, poolSlots: 1, poolSlot: 100,
				predicted: 2.5, floor: 1.5, miss: 1, poolBytes: 150, peak: 400},
		},
		{
			// One byte short of everything: 399 bytes for experts: e0
			// and e1 resident (200) and a slot (100); e2 no longer fits
			// beside the slot. Streamed e2 (copied in half the passes)
			// and e3 (never runs): 0.5 copies, 0.5 ms: predicted
			// 1 + max(0.35, 0.5) ms; every streamed call misses.
			"two resident experts", PlanInput{Units: four, Budget: 600 - 1, Curve: curve, MaxAnnounced: 1},
			want{resident: []bool{true, true, true, false, false}, poolSlots: 1, poolSlot: 100,
				predicted: 1.5, floor: 1.35, miss: 1, poolBytes: 50, peak: 500},
		},
		{
			// Two experts announced together: two slots reserved (200)
			// next to the dense unit, 300 bytes for experts: e0 resident
			// and two slots; e1, e2, e3 each copied once a pass (3 ms).
			"reserve of two", PlanInput{Units: []PlanUnit{dense("d", 200, 1), expert("e0", 100, 1, 1), expert("e1", 100, 1, 1),
				expert("e2", 100, 1, 1), expert("e3", 100, 1, 1)}, Budget: 500, Curve: curve, MaxAnnounced: 2},
			want{resident: []bool{true, true, false, false, false}, poolSlots: 2, poolSlot: 100,
				predicted: 4, floor: 3, miss: 1, poolBytes: 300, peak: 500},
		},
		{
			// 300 bytes cannot hold a 200-byte ring slot and two pool
			// slots: the reserve falls back to one. Both dense units
			// stream through one slot (2 ms copy, 1 ms compute each: a
			// pass of 6 ms); both experts copied once a pass (2 ms).
			"reserve falls back to one", PlanInput{Units: []PlanUnit{dense("d0", 200, 1), expert("e0", 100, 1, 1), dense("d1", 200, 1),
				expert("e1", 100, 1, 1)}, Budget: 300, Curve: curve, MaxAnnounced: 2},
			want{resident: []bool{false, false, false, false}, slots: 1, slotBytes: 200, poolSlots: 1, poolSlot: 100,
				predicted: 8, floor: 6, miss: 1, poolBytes: 200, peak: 300},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			pl, err := MakePlan(c.in)
			if err != nil {
				t.Fatal(err)
			}
			w := c.want
			if !slices.Equal(pl.Resident, w.resident) || pl.Slots != w.slots || pl.SlotBytes != w.slotBytes ||
				pl.PoolSlots != w.poolSlots || pl.PoolSlotBytes != w.poolSlot || pl.PeakBytes != w.peak {
				t.Errorf("got %v\nwant resident %v, %d×%d ring, %d×%d pool, peak %d", pl, w.resident, w.slots, w.slotBytes, w.poolSlots, w.poolSlot, w.peak)
			}
			if !planNear(pl.PredictedSec, w.predicted*planMs) || !planNear(pl.FloorSec, w.floor*planMs) {
				t.Errorf("predicted %v ms, floor %v ms; want %v, %v", pl.PredictedSec/planMs, pl.FloorSec/planMs, w.predicted, w.floor)
			}
			if !planNear(pl.ExpectedMissRate, w.miss) || !planNear(pl.ExpectedPoolBytes, w.poolBytes) {
				t.Errorf("expected miss rate %v, pool bytes %v; want %v, %v", pl.ExpectedMissRate, pl.ExpectedPoolBytes, w.miss, w.poolBytes)
			}
			for i, u := range c.in.Units {
				if u.Announced && pl.SlotOf[i] != -1 || slices.Contains(pl.Prefetch, i) && u.Announced {
					t.Errorf("announced unit %s placed in the ring (slot %d)", u.Name, pl.SlotOf[i])
				}
			}
			if sec, ok := PredictPlan(c.in, pl); !ok || !planNear(sec, pl.PredictedSec) {
				t.Errorf("PredictPlan %v %v, plan predicted %v", sec, ok, pl.PredictedSec)
			}
		})
	}
}

// TestMakePlanAnnouncedErrors: a budget without room for one pool slot, and
// bad frequencies.
func TestMakePlanAnnouncedErrors(t *testing.T) {
	curve := planPerByte(0.01 * planMs)
	e := func(bytes int64, calls, share float64) PlanUnit {
		return PlanUnit{Name: "model.layers.0.mlp.experts.3", Bytes: bytes, ComputeSec: planMs, Announced: true, Calls: calls, RunShare: share}
	}
	for _, c := range []struct {
		name      string
		in        PlanInput
		wantIn    string
		budgetErr bool
	}{
		{"no pool slot", PlanInput{Units: []PlanUnit{e(100, 1, 1), e(300, 1, 1)}, FixedBytes: 50, Budget: 300, Curve: curve}, "one pool slot", true},
		{"negative calls", PlanInput{Units: []PlanUnit{e(100, -1, 1)}, Budget: 300, Curve: curve}, "-1 calls per pass", false},
		{"share above one", PlanInput{Units: []PlanUnit{e(100, 1, 2)}, Budget: 300, Curve: curve}, "share 2 of passes", false},
		{"negative max announced", PlanInput{Units: []PlanUnit{e(100, 1, 1)}, Budget: 300, Curve: curve, MaxAnnounced: -1}, "MaxAnnounced", false},
		{"a host unit beside experts", PlanInput{Units: []PlanUnit{
			{Name: "model.layers.0.self_attn", Bytes: 100, ComputeSec: planMs, HostSecPerToken: planMs, ForceHost: true}, e(100, 1, 1)},
			Budget: 1000, Curve: curve}, "host placement does not combine", false},
	} {
		_, err := MakePlan(c.in)
		if err == nil || !strings.Contains(err.Error(), c.wantIn) || errors.Is(err, ErrBudget) != c.budgetErr {
			t.Errorf("%s: %v; want an error with %q (budget error %v)", c.name, err, c.wantIn, c.budgetErr)
		}
	}
}
