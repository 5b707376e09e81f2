package offload

import (
	"math"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flextensor-go/flextensor/kernels"
)

// copyScaleOf: the median measured/predicted ratio, never below 1 nor
// above hostCopyScaleMax; unusable samples are skipped; none usable leaves
// the curve alone.
func TestCopyScaleOf(t *testing.T) {
	c := FitH2D(0, 50e9) // 1 GB in 20 ms
	slow := []copySample{{1e9, 0.025}, {1e9, 0.027}, {1e9, 0.030}, {0, 1}, {1e9, 0}, {1e9, math.NaN()}, {1e9, math.Inf(1)}}
	cs, ok := copyScaleOf(slow, c)
	if !ok || cs.n != 3 || math.Abs(cs.scale-1.35) > 1e-9 {
		t.Fatalf("slow copies: %+v (ok %v), want scale 1.35 from 3 samples", cs, ok)
	}
	if math.Abs(cs.measured-1e9/0.027) > 1 || math.Abs(cs.profiled-50e9) > 1 {
		t.Fatalf("rates %v / %v, want %v measured and 50e9 profiled", cs.measured, cs.profiled, 1e9/0.027)
	}
	if cs, ok := copyScaleOf([]copySample{{1e9, 0.010}}, c); !ok || cs.scale != 1 {
		t.Fatalf("copies faster than the profile: %+v (ok %v), want scale 1", cs, ok)
	}
	if cs, ok := copyScaleOf([]copySample{{1e9, 1}}, c); !ok || cs.scale != hostCopyScaleMax {
		t.Fatalf("a copy 50x slower: %+v, want the scale clamped to %v", cs, hostCopyScaleMax)
	}
	for _, s := range [][]copySample{nil, {{0, 1}, {1e9, -1}}} {
		if cs, ok := copyScaleOf(s, c); ok {
			t.Fatalf("samples %v gave %+v; want none usable", s, cs)
		}
	}
	if _, ok := copyScaleOf(slow, H2DCurve{}); ok {
		t.Fatal("a curve without points gave a scale")
	}
}

// copyRateFixture is a ring of 4 units on the CPU device whose copies
// sleep nap while busy is set (host units running, sharing DRAM), and an
// engine measuring its host units with that ring under plan input in.
func copyRateFixture(t *testing.T, nap time.Duration, in PlanInput) (*engine, *ringFixture, *atomic.Bool) {
	t.Helper()
	f := newRingFixture(t, 2, []int{0, 1, 0, 1})
	busy := &atomic.Bool{}
	f.dev.CopyFault = func(op string, n int64) error {
		if n == gateBytes {
			<-f.gate
		}
		if busy.Load() {
			time.Sleep(nap)
		}
		return nil
	}
	cb, err := kernels.NewCPUBackend(f.dev)
	if err != nil {
		t.Fatal(err)
	}
	e := &engine{ring: f.r, planIn: in, cfg: Config{HostBackend: cb, TransferBudgetScale: 1}, hostBW: 1}
	if e.copyMeasure, err = hostCopyMeasureOn(); err != nil {
		t.Fatal(err)
	}
	for _, u := range in.Units {
		e.units = append(e.units, &unit{name: u.Name, bytes: u.Bytes})
	}
	e.hm.on, e.hm.key, e.hm.passes = true, in.Tokens, replanWarm
	e.hostCopyBegin()
	return e, f, busy
}

// onePass runs the ring's 4 units once, as a pass does.
func onePass(t *testing.T, f *ringFixture) {
	t.Helper()
	for pos := range 4 {
		f.run(t, pos)
		done(t, f, pos)
	}
}

// The copies a measured pass consumes are timed; slowed while host units
// run, they make the bucket's copy scale, which the plan input hostInputs
// builds carries (so the replan's prediction is the slower one) and the
// replan's trace reports. Copies issued ahead for the next pass wait for
// it.
func TestHostCopyMeasured(t *testing.T) {
	t.Setenv("FT_HOST_COPY_MEASURE", "") // restored after the test
	os.Unsetenv("FT_HOST_COPY_MEASURE")  // unset: on
	in := hostCase(3, 0.5, 1)
	in.Curve = FitH2D(0, unitBytes/0.010) // a unit's copy predicted at 10 ms
	pl, err := MakePlan(in)
	if err != nil {
		t.Fatal(err)
	}
	e, f, busy := copyRateFixture(t, 20*time.Millisecond, in)
	e.plan = pl
	busy.Store(true)
	onePass(t, f)
	if err := e.hostCopyCollect(true); err != nil {
		t.Fatal(err)
	}
	if len(e.hm.copies) != 4 {
		t.Fatalf("%d copies timed in a pass of 4 streamed units", len(e.hm.copies))
	}
	if len(f.r.copyLog) == 0 {
		t.Fatal("the next pass's prefetched copies were dropped or counted")
	}
	for _, s := range e.hm.copies {
		if s.bytes != unitBytes || s.sec < 0.019 {
			t.Fatalf("copy sample %+v: want %d bytes over at least the 20 ms it slept", s, unitBytes)
		}
	}
	e.hostCopyFinish(in.Tokens)
	if f.r.logCopies || f.r.copyLog != nil {
		t.Fatal("the ring still logs copies after the measurement")
	}
	cs := e.hm.copyByT[in.Tokens]
	if cs.scale < 1.9 || cs.scale > hostCopyScaleMax {
		t.Fatalf("copy scale %v, want about 2 (20 ms copies predicted at 10)", cs.scale)
	}
	e.hm.byT = map[int]map[*unit]float64{1: {}}
	for _, u := range e.units {
		e.hm.byT[1][u] = 3 // the host times stay the input's
	}
	got := in
	got.Units = append([]PlanUnit(nil), in.Units...)
	if err := e.hostInputs(&got, true); err != nil {
		t.Fatal(err)
	}
	if got.TransferScale != cs.scale {
		t.Fatalf("hostInputs' transfer scale %v, want the measured %v", got.TransferScale, cs.scale)
	}
	base, ok1 := PredictPlan(in, pl)
	slow, ok2 := PredictPlan(got, pl)
	if !ok1 || !ok2 || slow <= base {
		t.Fatalf("prediction with the measured copies %v (ok %v), with the profile %v (ok %v): want it slower", slow, ok2, base, ok1)
	}
	if note := e.copyNote(1); !strings.Contains(note, "copies measured at") || !strings.Contains(note, "profiled 0.0") {
		t.Fatalf("trace note %q", note)
	}
	if got := e.transferScale(8); got != 1 {
		t.Fatalf("another bucket's transfer scale %v, want 1", got)
	}
}

// Copies at the profile's speed (nothing slows them) leave the scale at 1;
// the warm-up pass's copies are no samples.
func TestHostCopyFastKeepsCurve(t *testing.T) {
	t.Setenv("FT_HOST_COPY_MEASURE", "1")
	in := hostCase(3, 0.5, 1)
	in.Curve = FitH2D(0, unitBytes/0.010)
	e, f, busy := copyRateFixture(t, 20*time.Millisecond, in)
	busy.Store(true)
	onePass(t, f)
	if err := e.hostCopyCollect(false); err != nil { // the warm-up
		t.Fatal(err)
	}
	if len(e.hm.copies) != 0 {
		t.Fatalf("the warm-up pass gave %d copy samples", len(e.hm.copies))
	}
	busy.Store(false)
	onePass(t, f)
	if err := e.hostCopyCollect(true); err != nil {
		t.Fatal(err)
	}
	if len(e.hm.copies) != 4 {
		t.Fatalf("%d samples", len(e.hm.copies))
	}
	e.hostCopyFinish(1)
	if s := e.transferScale(1); s != 1 {
		t.Fatalf("copies faster than the profile scaled copy times by %v", s)
	}
}

// A copy whose slot is released late is timed from its start on the copy
// stream, not from when it was issued: the wait for a free slot is not
// copy time.
func TestHostCopyWaitNotCounted(t *testing.T) {
	t.Setenv("FT_HOST_COPY_MEASURE", "1")
	in := hostCase(3, 0.5, 1)
	in.Curve = FitH2D(0, unitBytes/0.010)
	e, f, _ := copyRateFixture(t, 0, in)
	f.run(t, 0)
	f.run(t, 1)
	// Unit 0's reader finishes only when the gate opens: the copy of unit 2
	// into its slot waits for it on the copy stream.
	if err := f.r.done(0, f.gated(t)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(60 * time.Millisecond)
	f.open()
	done(t, f, 1)
	f.run(t, 2)
	done(t, f, 2)
	f.run(t, 3)
	done(t, f, 3)
	if err := e.hostCopyCollect(true); err != nil {
		t.Fatal(err)
	}
	if len(e.hm.copies) != 4 {
		t.Fatalf("%d samples", len(e.hm.copies))
	}
	for i, s := range e.hm.copies {
		if s.sec >= 0.05 {
			t.Fatalf("copy %d timed at %v s: the 60 ms wait for its slot was counted", i, s.sec)
		}
	}
}

// FT_HOST_COPY_MEASURE=0: the ring logs no copies and the bucket keeps the
// configured transfer scale.
func TestHostCopyMeasureOff(t *testing.T) {
	t.Setenv("FT_HOST_COPY_MEASURE", "0")
	in := hostCase(3, 0.5, 1)
	in.Curve = FitH2D(0, unitBytes/0.010)
	e, f, busy := copyRateFixture(t, 20*time.Millisecond, in)
	busy.Store(true)
	onePass(t, f)
	if err := e.hostCopyCollect(true); err != nil {
		t.Fatal(err)
	}
	if len(e.hm.copies) != 0 || len(f.r.copyLog) != 0 {
		t.Fatalf("switched off, %d samples and %d logged copies", len(e.hm.copies), len(f.r.copyLog))
	}
	e.hm.copies = []copySample{{unitBytes, 0.02}} // even with samples
	e.hostCopyFinish(1)
	if s := e.transferScale(1); s != 1 {
		t.Fatalf("switched off, transfer scale %v", s)
	}
	if n := e.copyNote(1); n != "" {
		t.Fatalf("switched off, trace note %q", n)
	}
}

// Without copy samples (nothing streamed in the measured passes) the
// curve stands and the trace says so.
func TestHostCopyNoSamples(t *testing.T) {
	e := &engine{planIn: PlanInput{Curve: FitH2D(0, 1e9), Tokens: 1}, cfg: Config{TransferBudgetScale: 1.5}, copyMeasure: true}
	e.hostCopyFinish(1)
	if s := e.transferScale(1); s != 1.5 {
		t.Fatalf("no samples: transfer scale %v, want the configured 1.5", s)
	}
	if n := e.copyNote(1); !strings.Contains(n, "no copy measured") {
		t.Fatalf("trace note %q", n)
	}
}
