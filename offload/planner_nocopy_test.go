package offload

import (
	"math"
	"testing"
)

// TestNoCopyPlanNeedsDRAMModel: the copy-nothing candidate (noCopyPlan) is
// weighed only under the shared-read model. On this input the plain model
// predicts it faster (200 ms: every unit resident or on the host) than the
// greedy three-way search's plan (250.8 ms: two units resident-like, three
// streamed, none on the host), yet with the DRAM model off the planner keeps
// the greedy choice, as it did before the model existed; with a DRAM figure
// set it weighs, and here takes, the copy-nothing plan.
func TestNoCopyPlanNeedsDRAMModel(t *testing.T) {
	in := PlanInput{Budget: 1462, Slots: 2, Curve: FitH2D(2e-4, 6e3), Tokens: 1}
	for i, u := range []struct {
		bytes         int64
		compute, host float64
	}{{500, 0.05, 0.26}, {500, 0.02, 0.12}, {200, 0.01, 0.3}, {400, 0.01, 0.13}, {300, 0.01, 0.18}} {
		in.Units = append(in.Units, PlanUnit{Name: string(rune('A' + i)), Bytes: u.bytes, ComputeSec: u.compute, HostSecPerToken: u.host})
	}
	nc, _, ok := noCopyPlan(in)
	if !ok || math.Abs(nc.PredictedSec-0.2) > 1e-9 {
		t.Fatalf("copy-nothing plan: %v s (ok %v), want 200 ms", nc.PredictedSec, ok)
	}
	off, err := MakePlan(in)
	if err != nil {
		t.Fatal(err)
	}
	if off.HostUnits() != 0 || off.Slots != 2 || math.Abs(off.PredictedSec-0.2508) > 1e-9 {
		t.Fatalf("DRAM model off: %d host units, %d slots, %v s; want the greedy plan (0, 2, 250.8 ms)\n%v", off.HostUnits(), off.Slots, off.PredictedSec, off)
	}
	in.HostReadBytesPerSec = 1e12 // the model on, with DRAM reads to spare
	on, err := MakePlan(in)
	if err != nil {
		t.Fatal(err)
	}
	if on.Slots != 0 || on.HostUnits() == 0 || on.PredictedSec >= off.PredictedSec {
		t.Fatalf("DRAM model on: %d host units, %d slots, %v s; want the copy-nothing plan\n%v", on.HostUnits(), on.Slots, on.PredictedSec, on)
	}
}
