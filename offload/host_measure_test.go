package offload

import (
	"math"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// PredictPlan scores a three-way plan as the planner did: for every
// hostCase the made plan's prediction is PredictPlan's, which differs from
// the two-way score that treats host units as streamed.
func TestPredictPlanHost(t *testing.T) {
	for _, in := range []PlanInput{hostCase(1, 0, 1), hostCase(3, 0.5, 1)} {
		pl, err := MakePlan(in)
		if err != nil {
			t.Fatal(err)
		}
		if pl.HostUnits() == 0 {
			t.Fatalf("no host unit in %v", pl)
		}
		got, ok := PredictPlan(in, pl)
		if !ok || math.Abs(got-pl.PredictedSec) > 1e-9 {
			t.Fatalf("PredictPlan %v (ok %v), the plan predicted %v\n%v", got, ok, pl.PredictedSec, pl)
		}
		// Scoring the host units as streamed ones (the two-way Simulate)
		// gives another time.
		if old, ok := Simulate(in, pl.Resident, pl.Slots); ok && math.Abs(old-got) < 1e-9 {
			t.Fatalf("PredictPlan %v equals the two-way score of the plan", got)
		}
	}
}

// hostSecPerToken: a measured unit takes its measurement; an unmeasured
// one its estimate, scaled up by the measured/estimated ratio but never
// down.
func TestHostSecPerToken(t *testing.T) {
	a, b, c := &unit{name: "a"}, &unit{name: "b"}, &unit{name: "c"}
	est := func(*unit) float64 { return 2 }
	h := hostMeasure{byT: map[int]map[*unit]float64{1: {a: 5, b: 7}}}
	r := h.hostRatio(1, est)
	if r != 3 { // median of 5/2 and 7/2
		t.Fatalf("ratio %v, want 3", r)
	}
	if s := h.hostSecPerToken(a, 1, 2, r); s != 5 {
		t.Fatalf("measured unit: %v, want 5", s)
	}
	if s := h.hostSecPerToken(c, 1, 2, r); s != 6 {
		t.Fatalf("unmeasured unit: %v, want the estimate scaled to 6", s)
	}
	if s := h.hostSecPerToken(c, 1, 2, 0.5); s != 2 {
		t.Fatalf("a ratio below 1 scaled the estimate to %v", s)
	}
	if r := h.hostRatio(64, est); r != 0 {
		t.Fatalf("a bucket without measurements has ratio %v", r)
	}
	if s := h.hostSecPerToken(a, 64, 2, 0); s != 2 {
		t.Fatalf("another bucket's measurement was used: %v", s)
	}
}

// hostUnitsLine lists the measured units in unit order, marks a unit whose
// predecessor is not on the host as a stretch start, and skips units not
// measured.
func TestHostUnitsLine(t *testing.T) {
	us := []*unit{{name: "0"}, {name: "1", onHost: true}, {name: "2", onHost: true}, {name: "3"}, {name: "4", onHost: true}}
	e := &engine{units: us}
	e.hm.samples = map[*unit][]float64{us[1]: {0.005, 0.0044}, us[2]: {0.004}}
	got := e.hostUnitsLine(map[*unit]float64{us[1]: 0.0046, us[2]: 0.004, us[4]: 0.0045})
	want := ": *4.60[5.00..4.40] 4.00[4.00..4.00] *4.50"
	if !strings.HasSuffix(got, want) {
		t.Fatalf("line %q, want it to end %q", got, want)
	}
}

// hostInputs' estimate for a forward of several tokens: the lower of the
// one-token rate times the tokens and the products timed at that count
// (per byte of the unit); a count past hostProdMaxTokens reads the capped
// figure; a forward of one token keeps the one-token rate.
func TestHostEstimateAtTokens(t *testing.T) {
	cb, err := kernels.NewCPUBackend(runtime.NewCPU(0))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tokens  int
		prod    float64 // timed seconds a byte at min(tokens, cap)
		perTok  float64 // want: seconds a token a byte
		comment string
	}{
		{1, 0, 1e-9, "one token: the GEMV rate"},
		{64, 16e-9, 0.25e-9, "products of 64 at a quarter of 64 GEMVs"},
		{64, 128e-9, 1e-9, "products slower than the GEMVs: the GEMV rate"},
		{1000, 64e-9, 0.25e-9, "past the cap: the cap's figure"},
	} {
		e := &engine{cfg: Config{HostBackend: cb, TransferBudgetScale: 1}, hostBW: 1e9, hostDRAM: 0.5e9, hostDRAMFrom: "test"}
		e.units = []*unit{{name: "u0", bytes: 1000}, {name: "u1", bytes: 2000}}
		if tc.prod > 0 {
			e.hostProd = map[int]float64{min(tc.tokens, hostProdMaxTokens): tc.prod}
		}
		in := PlanInput{Tokens: tc.tokens, Units: []PlanUnit{{Name: "u0", Bytes: 1000}, {Name: "u1", Bytes: 2000}}}
		if err := e.hostInputs(&in, true); err != nil {
			t.Fatalf("%s: %v", tc.comment, err)
		}
		for i, u := range in.Units {
			want := float64(u.Bytes) * tc.perTok
			if math.Abs(u.HostSecPerToken-want) > 1e-9*want {
				t.Errorf("%s: unit %d %g s a token, want %g", tc.comment, i, u.HostSecPerToken, want)
			}
		}
		// Without products (a host-free bucket's plan): the GEMV rate.
		if err := e.hostInputs(&in, false); err != nil {
			t.Fatal(err)
		}
		if got, want := in.Units[1].HostSecPerToken, 2000*1e-9; math.Abs(got-want) > 1e-9*want {
			t.Errorf("%s, no products: %g s a token, want %g", tc.comment, got, want)
		}
	}
}
