package offload

import (
	"fmt"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/kernels/exp4"
	"github.com/flextensor-go/flextensor/runtime"
)

// ring is the transfer ring of INFERENCE: the streamed units take turns in
// a few device slots. Copy g (the g-th over all passes) carries streamed
// unit g mod N into its slot once the slot's previous occupant has finished
// computing: the copy stream waits on the slot's release event (recorded on
// the compute stream after the occupant's forward), and the compute stream
// waits on the copy's ready event before the unit runs. Units must run in
// the same order every pass.
//
// The ring is used by one goroutine at a time (the engine's, under the
// manager's lock).
type ring struct {
	copy    runtime.Stream // the engine's copy stream; the engine replaces it on resync
	compute runtime.Stream
	// timeCopies records an event pair around each copy (in pending).
	timeCopies bool

	slots   []*runtime.DeviceBuffer
	unpack  kernels.Exp4Unpacker // unpacks packed copies (Config.Unpacker)
	release []runtime.Event      // compute event after the slot's last reader
	ready   []runtime.Event      // copy-stream event per slot: its latest copy is done
	occ     []int                // global copy index of the slot's latest occupant, -1 for none
	order   []ringUnit           // the streamed units, in run order

	issued  int // copies issued, counted over passes
	entered int // streamed-unit entries, counted over passes
	exited  int // streamed-unit exits, counted over passes
	pending map[int]*copyTiming

	// logCopies records an event pair around each copy into copyLog (the
	// host-measured passes' copy rate, host_copyrate.go).
	logCopies bool
	copyLog   []loggedCopy
}

// loggedCopy is one copy of copyLog: its global index and its events.
type loggedCopy struct {
	g  int
	ct *copyTiming
}

// ringUnit is one streamed unit: its packed host block and its slot;
// with packed set (Config.StreamExp4, exp4.go) its copies move packed into
// the end of the slot and are unpacked into its start.
type ringUnit struct {
	name   string
	slot   int
	host   *runtime.HostBuffer
	bytes  int64
	packed *runtime.HostBuffer
	layout exp4.Layout
}

// linkBytes is what a copy of u moves over the link.
func (u ringUnit) linkBytes() int64 {
	if u.packed != nil {
		return u.layout.Size
	}
	return u.bytes
}

// newRing allocates slots device buffers of slotBytes each for the streamed
// units (in run order). On an error nothing stays allocated.
func newRing(dev runtime.Device, copy runtime.Stream, slots int, slotBytes int64, units []ringUnit, unpack kernels.Exp4Unpacker) (*ring, error) {
	r := &ring{copy: copy, compute: dev.Compute(), order: units, pending: map[int]*copyTiming{}, unpack: unpack}
	for _, u := range units {
		if u.slot < 0 || u.slot >= slots {
			return nil, fmt.Errorf("offload: streamed unit %s placed in transfer block %d of %d", u.name, u.slot, slots)
		}
		need := u.bytes
		if u.packed != nil {
			if unpack == nil {
				return nil, fmt.Errorf("offload: streamed unit %s is packed but the engine has no unpacker", u.name)
			}
			need += u.layout.Size
		}
		if need > slotBytes {
			return nil, fmt.Errorf("offload: streamed unit %s (%d bytes with its packed copy) exceeds its transfer block (%d bytes)", u.name, need, slotBytes)
		}
	}
	for s := 0; s < slots; s++ {
		buf, err := dev.Alloc(slotBytes, fmt.Sprintf("offload transfer block %d", s))
		if err != nil {
			r.free()
			return nil, err
		}
		r.slots = append(r.slots, buf)
		r.release = append(r.release, nil)
		r.ready = append(r.ready, nil)
		r.occ = append(r.occ, -1)
	}
	return r, nil
}

// issue enqueues as many prefetch copies as free slots allow: copy g goes
// into its unit's slot once the slot's previous occupant has exited, after
// the copy stream waits on that occupant's release event.
func (r *ring) issue() error {
	n := len(r.order)
	if n == 0 {
		return nil
	}
	for {
		g := r.issued
		u := r.order[g%n]
		s := u.slot
		if r.occ[s] >= r.exited {
			return nil // the slot's occupant has not run yet
		}
		if r.release[s] != nil {
			if err := r.copy.Wait(r.release[s]); err != nil {
				return err
			}
		}
		var ct *copyTiming
		if r.timeCopies || r.logCopies {
			ct = &copyTiming{bytes: u.linkBytes()}
			var err error
			if ct.start, err = r.copy.Record(); err != nil {
				return err
			}
		}
		if err := r.copyIn(s, u); err != nil {
			return err
		}
		ev, err := r.copy.Record()
		if err != nil {
			return err
		}
		if ct != nil {
			ct.end = ev
			if r.timeCopies {
				r.pending[g] = ct
			}
			if r.logCopies {
				r.copyLog = append(r.copyLog, loggedCopy{g: g, ct: ct})
			}
		}
		r.ready[s], r.occ[s] = ev, g
		r.issued++
	}
}

// copyIn enqueues unit u's copy into slot s on the copy stream: its bytes
// as they are, or packed into the end of the slot and unpacked into its
// start (the two ranges cannot overlap: newRing checked the slot holds
// both).
func (r *ring) copyIn(s int, u ringUnit) error {
	slot := r.slots[s]
	if u.packed == nil {
		return r.copy.CopyH2D(slot, 0, u.host, 0, u.bytes)
	}
	off := slot.Size() - u.layout.Size
	if err := r.copy.CopyH2D(slot, off, u.packed, 0, u.layout.Size); err != nil {
		return err
	}
	return r.unpack.UnpackExp4(r.copy, slot, slot, off, u.layout)
}

// acquire readies the streamed unit at position pos of the run order as the
// next to run: its copy is issued (after the slots it waits on are
// released), onWait (when set) runs with the copy's timing (nil when copies
// are not timed), and the compute stream waits for the copy. It returns the
// slot holding the unit; enter then counts the entry.
func (r *ring) acquire(pos int, onWait func(*copyTiming) error) (*runtime.DeviceBuffer, error) {
	g := r.entered
	want := r.order[g%len(r.order)]
	if pos < 0 || pos >= len(r.order) || g%len(r.order) != pos {
		name := "?"
		if pos >= 0 && pos < len(r.order) {
			name = r.order[pos].name
		}
		return nil, fmt.Errorf("offload: streamed unit %s entered where the plan expects %s (units must run in the same order every pass)", name, want.name)
	}
	for r.issued <= g {
		before := r.issued
		if err := r.issue(); err != nil {
			return nil, err
		}
		if r.issued == before {
			return nil, fmt.Errorf("offload: no free transfer block for unit %s", want.name)
		}
	}
	if onWait != nil {
		ct := r.pending[g]
		delete(r.pending, g)
		if err := onWait(ct); err != nil {
			return nil, err
		}
	}
	if err := r.compute.Wait(r.ready[want.slot]); err != nil {
		return nil, err
	}
	return r.slots[want.slot], nil
}

// enter counts the entry of the unit acquire readied and issues the copies
// the ring has room for.
func (r *ring) enter() error {
	r.entered++
	return r.issue()
}

// done releases the slot of the streamed unit at pos: ev is the compute
// event after its forward, which the slot's next copy waits on.
func (r *ring) done(pos int, ev runtime.Event) error {
	r.release[r.order[pos].slot] = ev
	r.exited++
	return r.issue()
}

// reset forgets every copy in flight and frees every slot, so the next pass
// starts from idle slots. The caller has drained the streams.
func (r *ring) reset() {
	r.issued, r.entered, r.exited = 0, 0, 0
	for i := range r.occ {
		r.occ[i], r.release[i], r.ready[i] = -1, nil, nil
	}
	r.pending = map[int]*copyTiming{}
	r.copyLog = nil
}

// bytes is the device memory of the slots.
func (r *ring) bytes() int64 {
	var n int64
	for _, s := range r.slots {
		n += s.Size()
	}
	return n
}

// free returns the slots' device memory.
func (r *ring) free() {
	for _, b := range r.slots {
		b.Free()
	}
	r.slots, r.release, r.ready, r.occ = nil, nil, nil, nil
}
