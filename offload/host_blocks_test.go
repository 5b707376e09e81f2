package offload

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// ratedCase is hostCase (four 1-byte units, 3 s copies, two slots, budget
// of the two slots) with each unit's host time scaled as the engine scales
// its estimate by its host block's read rate (rateFactor): the fastest
// rate over the unit's, times base seconds a token.
func ratedCase(base, hop float64, rates []float64) PlanInput {
	in := hostCase(base, hop, 1)
	ref := slices.Max(rates)
	for u := range in.Units {
		in.Units[u].HostSecPerToken = base * ref / rates[u]
	}
	return in
}

// TestMakePlanHostBlockRates: identical units whose host blocks read at
// different rates. The planner puts the units on fast blocks on the host
// and predicts each from its own rate: the choice among identical units
// was free before (the first pair), now the fast pair wins wherever it is.
func TestMakePlanHostBlockRates(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rates []float64 // GB/s of each unit's block
		host  []int
		sec   float64
	}{
		// All blocks alike: the first pair, as without rates (3+3+2×0.5
		// = 7 s beside 6 s of copies; TestMakePlanHostThreeWay).
		{"uniform", []float64{140, 140, 140, 140}, []int{0, 1}, 7},
		// Units 0 and 1 on slow blocks (70 GB/s: 6 s on the host): the
		// fast pair 2, 3 computes in 3+3+1 = 7 s; the slow pair would
		// take 6+6+1 = 13.
		{"fast pair last", []float64{70, 70, 140, 140}, []int{2, 3}, 7},
		// Fast blocks apart (units 1 and 3): two stretches of one unit,
		// 3+1 s each, beside the copies of units 0 and 2 (3 s each); the
		// slow-block units would take 6 s each on the host.
		{"fast blocks apart", []float64{70, 140, 70, 140}, []int{1, 3}, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := ratedCase(3, 0.5, tc.rates)
			pl, err := MakePlan(in)
			if err != nil {
				t.Fatal(err)
			}
			var host []int
			for u := range in.Units {
				if pl.IsHost(u) {
					host = append(host, u)
				}
			}
			if !slices.Equal(host, tc.host) {
				t.Fatalf("host units %v, want %v\n%v", host, tc.host, pl)
			}
			if math.Abs(pl.PredictedSec-tc.sec) > 1e-9 {
				t.Fatalf("predicted %v s, want %v\n%v", pl.PredictedSec, tc.sec, pl)
			}
		})
	}
}

// TestSwapHost: a unit on a fast block that the two-way search
// made resident swaps places with a slower host unit. Four 1-byte units,
// 3 s copies, one slot, budget 3 (two resident + the slot), no hop, host
// times 1 s (unit 0, fast block) and 4 s (the rest). Units 0 and 1
// resident, 2 on the host, 3 streamed: a pass takes 4 s (unit 2's host
// time; unit 3's copy runs beside it). With 0 on the host and 2 resident
// the pass is copy-bound: 3 s. MakePlan does better still: units 1-3
// resident in the budget's 3 bytes and unit 0 on the host, 1 s a pass
// (unit 0's host time; nothing copies).
func TestSwapHost(t *testing.T) {
	in := PlanInput{Budget: 3, Slots: 1, Curve: FitH2D(0, 1.0/3), Tokens: 1}
	for u, s := range []float64{1, 4, 4, 4} {
		in.Units = append(in.Units, PlanUnit{Name: string(rune('a' + u)), Bytes: 1, HostSecPerToken: s})
	}
	host := []bool{false, false, true, false}
	res := []bool{true, true, true, false} // host units count as resident
	before, ok := Simulate(hostInput(in, host), res, 1)
	if !ok || math.Abs(before-4) > 1e-9 {
		t.Fatalf("before the swap: %v s (ok %v), want 4", before, ok)
	}
	sec, moved := swapHost(in, host, res, 1, before)
	if !moved || !slices.Equal(host, []bool{true, false, false, false}) {
		t.Fatalf("host %v after the swap, want unit 0 only", host)
	}
	if math.Abs(sec-3) > 1e-9 {
		t.Fatalf("after the swap: %v s, want 3", sec)
	}
	// Uniform host times: nothing swaps.
	uni := in
	uni.Units = slices.Clone(in.Units)
	uni.Units[0].HostSecPerToken = 4
	host = []bool{false, false, true, false}
	if s, moved := swapHost(uni, host, res, 1, before); moved || s != before || !slices.Equal(host, []bool{false, false, true, false}) {
		t.Fatalf("uniform units: swapped to %v (%v s)", host, s)
	}
	pl, err := MakePlan(in)
	if err != nil {
		t.Fatal(err)
	}
	if !pl.IsHost(0) || pl.HostUnits() != 1 || math.Abs(pl.PredictedSec-1) > 1e-9 {
		t.Fatalf("MakePlan: unit 0 on the host %v, %d host units, predicted %v s; want true, 1, 1 s\n%v", pl.IsHost(0), pl.HostUnits(), pl.PredictedSec, pl)
	}
}

// TestRateFactor: a unit's host estimate is multiplied by the fastest
// block's rate over its own; unrated units, and every unit with rates off,
// get 1.
func TestRateFactor(t *testing.T) {
	e := &engine{rateBlocksOn: true}
	for _, r := range []float64{140e9, 70e9, 0, 35e9} {
		e.units = append(e.units, &unit{hostRate: r})
	}
	ref := e.maxBlockRate()
	if ref != 140e9 {
		t.Fatalf("max rate %v, want 1.4e11", ref)
	}
	for i, want := range []float64{1, 2, 1, 4} {
		if got := e.rateFactor(e.units[i], ref); got != want {
			t.Errorf("unit %d: factor %v, want %v", i, got, want)
		}
	}
	e.rateBlocksOn = false
	if got := e.rateFactor(e.units[3], ref); got != 1 {
		t.Errorf("rates off: factor %v, want 1", got)
	}
}

// TestBlockRatesTrace: the pack-time line gives the rated blocks' min /
// median / max and how many are fast; the plan line lists the host units'
// rates and the fastest block left off the host.
func TestBlockRatesTrace(t *testing.T) {
	rates := []float64{140e9, 60e9, 130e9, 0, 100e9}
	var units []*unit
	for i, r := range rates {
		u := &unit{idx: i, hostRate: r}
		if r == 0 {
			u.host = hostBufForTest(16)
		}
		units = append(units, u)
	}
	line := blockRatesLine(units)
	for _, want := range []string{"4 blocks rated", "min 60.0 / median 115.0 / max 140.0", "2 fast (>= 75% of the max)", "1 too small to rate"} {
		if !strings.Contains(line, want) {
			t.Errorf("%q lacks %q", line, want)
		}
	}
	e := &engine{units: units}
	p := Plan{Host: []bool{true, false, false, false, true}}
	got := e.hostRatesTrace(p)
	if want := ", host units' blocks (unit:GB/s) 0:140.0 4:100.0, fastest block off the host 2:130.0"; got != want {
		t.Errorf("plan trace %q, want %q", got, want)
	}
	if got := e.hostRatesTrace(Plan{Host: []bool{false, false, false, true, false}}); got != "" {
		t.Errorf("no rated host unit: %q, want empty", got)
	}
}

// hostBufForTest is an n-byte host buffer of no device.
func hostBufForTest(n int) *runtime.HostBuffer {
	return runtime.NewHostBuffer(nil, "test block", make([]byte, n), nil)
}
