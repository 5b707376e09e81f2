package offload

import (
	"math"
	"testing"
)

// shareCase is unit kinds in order ('h' host, 's' streamed, 'r' resident)
// with every copy at 100 bytes a second (FitH2D, no latency), streamed
// units of 100 bytes (1 s a copy) and no device compute, resident units of
// 0.25 s compute, host units of hostBytes read in hostSec alone, the
// host's DRAM read bandwidth dram (bytes a second) and a budget of the
// slots; it returns the input and the plan.
func shareCase(kinds string, slots int, hostBytes int64, hostSec, dram, hop float64) (PlanInput, Plan) {
	in := PlanInput{Budget: int64(slots) * 100, Curve: FitH2D(0, 100), HostReadBytesPerSec: dram, HopSec: hop, Tokens: 1}
	pl := Plan{Slots: slots}
	for i, k := range kinds {
		u := PlanUnit{Name: string(k) + string(rune('0'+i))}
		switch k {
		case 'h':
			u.Bytes, u.HostSecPerToken = hostBytes, hostSec
		case 's':
			u.Bytes = 100
		case 'r':
			u.ComputeSec = 0.25
		}
		in.Units = append(in.Units, u)
		pl.Resident = append(pl.Resident, k == 'r')
		pl.Host = append(pl.Host, k == 'h')
	}
	return in, pl
}

// TestPredictHostShared checks the shared-read model on cases computed by
// hand (see each case).
func TestPredictHostShared(t *testing.T) {
	for _, tc := range []struct {
		name               string
		kinds              string
		slots              int
		hostBytes          int64
		hostSec, dram, hop float64
		want               float64 // the forward
		run                float64 // the first host unit's run (work, no hops)
	}{
		// The host unit (100 bytes in 1 s: 100 B/s) runs while the copy
		// of the next pass's streamed unit (1 s at 100 B/s) does: with
		// 150 B/s of DRAM it gets 50 B/s, half speed, for that second
		// (0.5 s of work), then the other 0.5 s alone: 1.5 s.
		{name: "shared", kinds: "hs", slots: 1, hostBytes: 100, hostSec: 1, dram: 150, want: 1.5, run: 1.5},
		// DRAM figure missing: the host unit runs alone beside the copy.
		{name: "no DRAM figure", kinds: "hs", slots: 1, hostBytes: 100, hostSec: 1, dram: 0, want: 1, run: 1},
		// 200 B/s leave the host its whole 100 B/s.
		{name: "DRAM enough for both", kinds: "hs", slots: 1, hostBytes: 100, hostSec: 1, dram: 200, want: 1, run: 1},
		// DRAM at the copy rate: the host keeps the floor, a tenth of
		// 100 B/s (0.1 of its speed): 0.1 s of work in the copy's second,
		// then 0.9 s alone.
		{name: "DRAM at the copy rate", kinds: "hs", slots: 1, hostBytes: 100, hostSec: 1, dram: 100, want: 1.9, run: 1.9},
		// No copies (the other unit resident): 1 s on the host, 0.25 s on
		// the device, whatever the DRAM.
		{name: "no copies", kinds: "hr", slots: 1, hostBytes: 100, hostSec: 1, dram: 150, want: 1.25, run: 1},
		// Hops of 0.25 s: the host starts 0.25 s into the copy, so 0.75 s
		// at half speed (0.375 s of work), 0.625 s alone, then the hop
		// back: 0.25 + 1.375 + 0.25 = 1.875 s.
		{name: "hops", kinds: "hs", slots: 1, hostBytes: 100, hostSec: 1, dram: 150, hop: 0.25, want: 1.875, run: 1.375},
		// One slot, host unit of 3 s (300 bytes: 100 B/s), then two
		// streamed units: only the first one's copy may run during the
		// host unit (the second's slot is released when the first has
		// computed): 1 s at half speed, 2.5 s alone, then the second copy
		// (1 s): 4.5 s.
		{name: "one slot", kinds: "hss", slots: 1, hostBytes: 300, hostSec: 3, dram: 150, want: 4.5, run: 3.5},
		// Same without the DRAM figure: 3 s of host, then the second
		// copy: 4 s.
		{name: "one slot, no DRAM figure", kinds: "hss", slots: 1, hostBytes: 300, hostSec: 3, dram: 0, want: 4, run: 3},
		// Two slots: both copies (2 s) run during the host unit at half
		// speed (1 s of work), then 2 s alone: 4 s.
		{name: "two slots", kinds: "hss", slots: 2, hostBytes: 300, hostSec: 3, dram: 150, want: 4, run: 4},
		// Two slots without the DRAM figure: both copies hidden, 3 s.
		{name: "two slots, no DRAM figure", kinds: "hss", slots: 2, hostBytes: 300, hostSec: 3, dram: 0, want: 3, run: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, pl := shareCase(tc.kinds, tc.slots, tc.hostBytes, tc.hostSec, tc.dram, tc.hop)
			sec, ok := PredictPlan(in, pl)
			if !ok || math.Abs(sec-tc.want) > 1e-9 {
				t.Fatalf("PredictPlan = %v, %v; want %v s", sec, ok, tc.want)
			}
			runs, sec2, ok := hostRunTimes(in, pl)
			if !ok || math.Abs(sec2-tc.want) > 1e-9 || math.Abs(runs[0]-tc.run) > 1e-9 {
				t.Fatalf("hostRunTimes = %v, %v, %v; want the host unit's run %v s in a %v s forward", runs, sec2, ok, tc.run, tc.want)
			}
		})
	}
}

// TestPredictTwoWayIgnoresDRAM: without host units the DRAM figure changes
// nothing (four streamed units of 3 s copies: 12 s either way).
func TestPredictTwoWayIgnoresDRAM(t *testing.T) {
	in := hostCase(0, 0, 1)
	pl, err := MakePlan(in)
	if err != nil {
		t.Fatal(err)
	}
	in.HostReadBytesPerSec = 1
	pl2, err := MakePlan(in)
	if err != nil {
		t.Fatal(err)
	}
	if pl.PredictedSec != 12 || pl2.PredictedSec != 12 || pl2.HostUnits() != 0 {
		t.Fatalf("predicted %v s without and %v s with the DRAM figure (%d host units); want 12 s, no host unit", pl.PredictedSec, pl2.PredictedSec, pl2.HostUnits())
	}
}

// TestMakePlanHostShared: four units of 2 bytes, copies at 2/3 B/s (3 s),
// no device compute, a budget of 2 bytes (one resident unit or one slot),
// host units of 2.5 s alone (0.8 B/s). Without the DRAM figure the best
// plan alternates host and streamed units in one slot: each copy (3 s)
// hides behind a host unit (2.5 s), 6 s a pass, against 3 × 2.5 = 7.5 s
// for one resident unit and three host ones. With 1 B/s of DRAM a host unit
// keeps 1 − 2/3 = 1/3 B/s while a copy runs (0.417 of its speed): the
// alternating plan takes 2 × (3 + 1.25) = 8.5 s, three host units beside
// one copy 3 + 6.25 = 9.25 s, so one resident and three host units (7.5 s,
// no copy) win.
func TestMakePlanHostShared(t *testing.T) {
	in := PlanInput{Budget: 2, Curve: FitH2D(0, 2.0/3), Tokens: 1}
	for _, name := range []string{"u0", "u1", "u2", "u3"} {
		in.Units = append(in.Units, PlanUnit{Name: name, Bytes: 2, HostSecPerToken: 2.5})
	}
	pl, err := MakePlan(in)
	if err != nil {
		t.Fatal(err)
	}
	if pl.HostUnits() != 2 || math.Abs(pl.PredictedSec-6) > 1e-9 {
		t.Fatalf("without DRAM figure: %d host units, %v s; want 2, 6 s\n%v", pl.HostUnits(), pl.PredictedSec, pl)
	}
	in.HostReadBytesPerSec = 1
	if sec, ok := PredictPlan(in, pl); !ok || math.Abs(sec-8.5) > 1e-9 {
		t.Fatalf("the alternating plan under 1 B/s of DRAM predicts %v, %v; want 8.5 s\n%v", sec, ok, pl)
	}
	pl, err = MakePlan(in)
	if err != nil {
		t.Fatal(err)
	}
	res := 0
	for u, r := range pl.Resident {
		if r && !pl.IsHost(u) {
			res++
		}
	}
	if pl.HostUnits() != 3 || res != 1 || math.Abs(pl.PredictedSec-7.5) > 1e-9 {
		t.Fatalf("with DRAM figure: %d host, %d resident units, %v s; want 3, 1, 7.5 s\n%v", pl.HostUnits(), res, pl.PredictedSec, pl)
	}
}

// TestHostAloneTimes: shareCase "hs" (host unit of 100 bytes, estimate 1 s,
// beside a 1 s copy at 100 B/s, 150 B/s of DRAM). At alone time k the unit
// reads at 100/k B/s and gets min(1, k/2) of its speed during the copy, so
// it runs 1 + k/2 s (k ≤ 2): measured 1.5 s is the estimate (1 s alone),
// 1.25 s is 0.5 s alone and 2 s is 2 s alone. Without the DRAM figure the
// measurement is the alone time.
func TestHostAloneTimes(t *testing.T) {
	for _, tc := range []struct {
		dram, meas, want float64
	}{
		{150, 1.5, 1}, {150, 1.25, 0.5}, {150, 2, 2}, {0, 1.25, 1.25},
	} {
		in, pl := shareCase("hs", 1, 100, 1, tc.dram, 0)
		got := hostAloneTimes(in, pl, map[int]float64{0: tc.meas})
		if math.Abs(got[0]-tc.want) > 1e-6 {
			t.Errorf("DRAM %v B/s, measured %v s: alone %v s, want %v", tc.dram, tc.meas, got[0], tc.want)
		}
	}
}

// TestPlanInputRejectsBadDRAM: a negative or NaN DRAM figure is an error.
func TestPlanInputRejectsBadDRAM(t *testing.T) {
	for _, v := range []float64{-1, math.NaN(), math.Inf(1)} {
		in := hostCase(1, 0, 1)
		in.HostReadBytesPerSec = v
		if _, err := MakePlan(in); err == nil {
			t.Errorf("HostReadBytesPerSec %v: no error", v)
		}
	}
}

// h200Input is the Llama-3-8B shape as measured on the H200 machine: 32
// layers of 436 MB, 0.15 ms of device compute each, copies at 55 GB/s
// (20 µs latency), hops of 60 µs, a host layer of 3.15 ms alone, 2.45 GB
// fixed on the device and two slots.
func h200Input(budget int64, dram float64) PlanInput {
	in := PlanInput{FixedBytes: 2.45e9, Budget: budget, Slots: 2, Curve: FitH2D(20e-6, 55e9), HopSec: 60e-6, Tokens: 1, HostReadBytesPerSec: dram}
	for i := range 32 {
		in.Units = append(in.Units, PlanUnit{Name: string(rune('A' + i)), Bytes: 436e6, ComputeSec: 0.15e-3, HostSecPerToken: 3.15e-3})
	}
	return in
}

// TestHostSharedH200: with the H200's ~140 GB/s of DRAM reads a host layer
// beside a 55 GB/s copy gets ~85 GB/s: 436 MB in 5.12 ms (measured inside
// the hybrid forward: 4.9-5.5 ms). With the host alone near the DRAM
// figure a copy then saves no time, so at the smallest budget (two slots'
// bytes) the planner keeps two layers resident and computes the other 30 on
// the host with no copy: 30 × 3.15 + 2 × 0.15 ms + two hops = 94.92 ms.
// Without the DRAM figure it streams some (copies look free beside the
// host).
func TestHostSharedH200(t *testing.T) {
	budget := int64(2.45e9 + 2*436e6)
	in := h200Input(budget, 140e9)
	pl := Plan{Slots: 1, Resident: make([]bool, 32), Host: make([]bool, 32)}
	for u := 1; u < 32; u++ {
		pl.Host[u] = true // unit 0 streamed: its copy runs beside the host stretch
	}
	runs, _, ok := hostRunTimes(in, pl)
	c := 436e6 / (20e-6 + 436e6/55e9) // the copy's rate, its latency included
	if want := 436e6 / (140e9 - c); !ok || math.Abs(runs[1]-want) > 1e-9 || math.Abs(want-5.12e-3) > 0.01e-3 {
		t.Fatalf("host layer beside a copy: %v s (ok %v), want 436 MB / (140 − %.1f GB/s) = %v s", runs[1], ok, c/1e9, want)
	}
	best, err := MakePlan(in)
	if err != nil {
		t.Fatal(err)
	}
	if best.HostUnits() != 30 || best.Slots != 0 || math.Abs(best.PredictedSec-94.92e-3) > 1e-6 {
		t.Fatalf("budget 0 with the DRAM figure: %d host units, %d slots, %v s; want 30, 0, 94.92 ms\n%v", best.HostUnits(), best.Slots, best.PredictedSec, best)
	}
	in.HostReadBytesPerSec = 0
	off, err := MakePlan(in)
	if err != nil {
		t.Fatal(err)
	}
	if off.Slots == 0 || off.PredictedSec >= best.PredictedSec {
		t.Fatalf("without the DRAM figure: %d slots, %v s; want copies and a prediction below %v s\n%v", off.Slots, off.PredictedSec, best.PredictedSec, off)
	}
}
