package offload

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/flextensor-go/flextensor/runtime"
)

// ringFixture is a ring of nUnits units of 64 bytes on a CPU device with a
// real (goroutine) copy stream; unit i's host block is filled with byte i+1.
type ringFixture struct {
	dev   *runtime.CPUDevice
	copy  runtime.Stream
	hosts []*runtime.HostBuffer
	r     *ring
	gate  chan struct{} // a copy of gateBytes blocks until it closes
}

const unitBytes, gateBytes = 64, 7

func newRingFixture(t *testing.T, slots int, slotOf []int) *ringFixture {
	t.Helper()
	f := &ringFixture{dev: runtime.NewCPU(0), gate: make(chan struct{})}
	f.dev.CopyFault = func(op string, n int64) error {
		if n == gateBytes {
			<-f.gate
		}
		return nil
	}
	var err error
	if f.copy, err = f.dev.NewStream("copy"); err != nil {
		t.Fatal(err)
	}
	var units []ringUnit
	for i, s := range slotOf {
		h, err := f.dev.AllocHost(unitBytes, "unit")
		if err != nil {
			t.Fatal(err)
		}
		for j := range h.Bytes() {
			h.Bytes()[j] = byte(i + 1)
		}
		f.hosts = append(f.hosts, h)
		units = append(units, ringUnit{name: "u" + string(rune('0'+i)), slot: s, host: h, bytes: unitBytes})
	}
	if f.r, err = newRing(f.dev, f.copy, slots, unitBytes, units, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.open()
		f.copy.Close()
		f.r.free()
		for _, h := range f.hosts {
			h.Free()
		}
		if err := f.dev.Close(); err != nil {
			t.Error(err)
		}
	})
	return f
}

// open opens the gate (once).
func (f *ringFixture) open() {
	select {
	case <-f.gate:
	default:
		close(f.gate)
	}
}

// gated returns an event that completes only when the fixture's gate opens
// (a compute stream still running the slot's reader).
func (f *ringFixture) gated(t *testing.T) runtime.Event {
	t.Helper()
	s, err := f.dev.NewStream("slow compute")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.open(); s.Close() })
	a, _ := f.dev.Alloc(gateBytes, "gate a")
	b, _ := f.dev.Alloc(gateBytes, "gate b")
	t.Cleanup(func() { a.Free(); b.Free() })
	if err := s.CopyD2D(a, 0, b, 0, gateBytes); err != nil {
		t.Fatal(err)
	}
	ev, err := s.Record()
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// run acquires and enters the unit at pos and checks its slot holds it.
func (f *ringFixture) run(t *testing.T, pos int) *runtime.DeviceBuffer {
	t.Helper()
	slot, err := f.r.acquire(pos, nil)
	if err != nil {
		t.Fatalf("acquire %d: %v", pos, err)
	}
	if !bytes.Equal(slot.Bytes(), f.hosts[pos].Bytes()) {
		t.Fatalf("unit %d's slot holds %v, not the unit", pos, slot.Bytes()[:4])
	}
	if err := f.r.enter(); err != nil {
		t.Fatal(err)
	}
	return slot
}

func done(t *testing.T, f *ringFixture, pos int) {
	t.Helper()
	ev, _ := f.dev.Compute().Record()
	if err := f.r.done(pos, ev); err != nil {
		t.Fatal(err)
	}
}

func TestRingOrderAndSlotReuse(t *testing.T) {
	f := newRingFixture(t, 2, []int{0, 1, 0})
	r := f.r
	slot0 := f.run(t, 0)
	if r.issued != 2 || r.occ[0] != 0 || r.occ[1] != 1 {
		t.Fatalf("after the first entry: issued %d, occupants %v; want 2, [0 1]", r.issued, r.occ)
	}
	// Units run in the plan's order.
	if _, err := r.acquire(2, nil); err == nil || !strings.Contains(err.Error(), "u2 entered where the plan expects u1") {
		t.Fatalf("out-of-order entry: %v", err)
	}
	// Unit 0 exits, but its reader is still running: the copy of unit 2
	// into slot 0 is issued and must wait for the release event.
	release := f.gated(t)
	if err := r.done(0, release); err != nil {
		t.Fatal(err)
	}
	if r.issued != 3 || r.occ[0] != 2 {
		t.Fatalf("after unit 0's exit: issued %d, occupants %v", r.issued, r.occ)
	}
	time.Sleep(20 * time.Millisecond) // room for a wrong copy to land
	if !bytes.Equal(slot0.Bytes(), f.hosts[0].Bytes()) {
		t.Fatal("slot 0 was overwritten before its reader released it")
	}
	f.run(t, 1) // unit 1 is in its own slot: no wait on the gate
	done(t, f, 1)
	if release.Done() {
		t.Fatal("the release event completed before the gate opened")
	}
	f.open()
	f.run(t, 2) // now unit 2's copy lands in slot 0
	done(t, f, 2)
	// Next pass: the ring wraps around.
	if r.issued != 5 {
		t.Fatalf("issued %d after a pass, want 5 (the next pass's first two)", r.issued)
	}
	for pos := 0; pos < 3; pos++ {
		f.run(t, pos)
		done(t, f, pos)
	}
	if r.entered != 6 || r.exited != 6 {
		t.Fatalf("entered %d, exited %d, want 6, 6", r.entered, r.exited)
	}
}

func TestRingNoFreeSlot(t *testing.T) {
	f := newRingFixture(t, 1, []int{0, 0})
	f.run(t, 0)
	// Unit 1 shares the slot with unit 0, which has not exited.
	if _, err := f.r.acquire(1, nil); err == nil || !strings.Contains(err.Error(), "no free transfer block for unit u1") {
		t.Fatalf("acquire with the slot held: %v", err)
	}
	done(t, f, 0)
	f.run(t, 1)
}

func TestRingTimedCopies(t *testing.T) {
	f := newRingFixture(t, 2, []int{0, 1, 0})
	f.r.timeCopies = true
	var got *copyTiming
	if _, err := f.r.acquire(0, func(ct *copyTiming) error { got = ct; return nil }); err != nil {
		t.Fatal(err)
	}
	if got == nil || got.bytes != unitBytes || got.start == nil || got.end == nil {
		t.Fatalf("copy timing %+v", got)
	}
	if _, ok := f.r.pending[0]; ok || len(f.r.pending) != 1 {
		t.Fatalf("pending after acquiring copy 0: %v", f.r.pending)
	}
}

// TestRingReset: an abandoned pass (copies issued, a unit entered and never
// exited) is forgotten: every slot is free again and the next pass starts
// from unit 0.
func TestRingReset(t *testing.T) {
	f := newRingFixture(t, 2, []int{0, 1, 0})
	f.run(t, 0)
	done(t, f, 0)
	f.run(t, 1) // entered, never exits: the pass is abandoned
	if err := f.copy.Synchronize(); err != nil {
		t.Fatal(err)
	}
	f.r.reset()
	r := f.r
	if r.issued != 0 || r.entered != 0 || r.exited != 0 || len(r.pending) != 0 {
		t.Fatalf("after reset: issued %d entered %d exited %d pending %d", r.issued, r.entered, r.exited, len(r.pending))
	}
	for s := range r.occ {
		if r.occ[s] != -1 || r.release[s] != nil || r.ready[s] != nil {
			t.Fatalf("slot %d still held after reset", s)
		}
	}
	for pos := 0; pos < 3; pos++ {
		f.run(t, pos)
		done(t, f, pos)
	}
}

func TestRingAllocation(t *testing.T) {
	dev := runtime.NewCPU(3 * unitBytes)
	s, _ := dev.NewStream("copy")
	defer s.Close()
	h, _ := dev.AllocHost(unitBytes, "unit")
	defer h.Free()
	units := []ringUnit{{name: "a", slot: 0, host: h, bytes: unitBytes}, {name: "b", slot: 1, host: h, bytes: unitBytes}}
	r, err := newRing(dev, s, 2, unitBytes, units, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.bytes() != 2*unitBytes || dev.Memory().InUse != 2*unitBytes {
		t.Fatalf("ring bytes %d, device %d", r.bytes(), dev.Memory().InUse)
	}
	r.free()
	if dev.Memory().InUse != 0 {
		t.Fatal("free left slots allocated")
	}
	// The fourth slot does not fit: the three taken are returned.
	if _, err := newRing(dev, s, 4, unitBytes, units, nil); err == nil || dev.Memory().InUse != 0 {
		t.Fatalf("failed ring: %v, %d bytes left", err, dev.Memory().InUse)
	}
	if _, err := newRing(dev, s, 1, unitBytes, units, nil); err == nil || !strings.Contains(err.Error(), "b placed in transfer block 1 of 1") {
		t.Fatalf("unit in a missing slot: %v", err)
	}
	if _, err := newRing(dev, s, 2, unitBytes/2, units, nil); err == nil || !strings.Contains(err.Error(), "exceeds its transfer block") {
		t.Fatalf("unit larger than its slot: %v", err)
	}
}
