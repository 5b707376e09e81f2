package offload

// Data-dependent units (a mixture of experts' experts, a conditional
// branch's modules): units that run zero, one or several times a pass, in an
// order known only at run time.
//
// A unit is data-dependent ("announced") when a module of the forward
// announces it (nn.Announce), when it lies under a module that has
// announced children, or when a recorded DISCOVERY or PROFILING pass ran
// it other than exactly once: the engine learns this before INFERENCE,
// while it counts each unit's calls per pass. In INFERENCE the
// announced units the plan streams do not take part in the cyclic transfer
// ring (ring.go); they share a pool of device slots, a cache:
//
//   - nn.Announce(parent, next...) issues, in order, the copies of the
//     announced units that are not already in a slot, into slots no running
//     or still-announced unit holds, chosen by the eviction policy; the
//     copies run on the copy stream while the previous units compute. When
//     every slot is held by a unit announced and not yet run, the rest are
//     copied when they enter (never a deadlock: the pool needs one slot).
//   - A unit's entry binds it: resident, nothing to do; in a slot (a hit,
//     or a copy issued at its announcement), the compute stream waits for
//     the slot's copy; otherwise the copy is issued now, into a slot taken
//     from an announced unit if need be, and waited for.
//   - A unit's exit records the compute event its slot's next copy waits
//     for, so a copy never overwrites weights a kernel still reads.
//
// Units that an announcement names but the forward never calls, and units
// that are called twice, are both fine: announcements are advisory and end
// with the pass. The dense units keep the ring, unchanged.

import (
	"fmt"
	"slices"

	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// EvictionPolicy picks which pool slot an announced unit's copy reuses.
type EvictionPolicy int

const (
	// EvictFrequency (the default) evicts the unit called least per pass:
	// its profiled calls per pass plus the calls counted since, ties broken
	// by least recent use. On a skewed routing it keeps the hot streamed
	// experts cached where LRU cycles them out (see pool_test.go's trace).
	EvictFrequency EvictionPolicy = iota
	// EvictLRU evicts the least recently used unit.
	EvictLRU
)

// String names the policy.
func (p EvictionPolicy) String() string {
	if p == EvictLRU {
		return "lru"
	}
	return "frequency"
}

// pool is the device slots the streamed announced units share. It is used
// by one goroutine at a time (the engine's, under the manager's lock).
type pool struct {
	copy    runtime.Stream // the engine's copy stream (replaced on resync)
	compute runtime.Stream
	policy  EvictionPolicy
	// timeCopies records an event pair around each copy.
	timeCopies bool

	slots   []*runtime.DeviceBuffer
	holder  []*unit         // the unit whose weights the slot holds (or is receiving), nil for none
	ready   []runtime.Event // copy-stream event: the slot's latest copy is done
	release []runtime.Event // compute event after the slot's latest reader
	want    []int           // announcements of the holder not yet entered (this pass)
	busy    []bool          // the holder is running
	last    []uint64        // use clock of the holder's latest entry or copy
	clock   uint64

	pass PoolStats // this pass's counts of streamed units
	// prior weighs the profiled calls per pass against the calls counted
	// since (EvictFrequency): the profiled passes' worth.
	prior float64
}

// PoolStats counts the calls of announced units and what they cost.
type PoolStats struct {
	Passes        int   // forward passes counted
	Calls         int64 // entries of announced units
	ResidentCalls int64 // of those, of resident units
	Hits          int64 // of those, of streamed units found in a pool slot
	Misses        int64 // of those, of streamed units whose weights were copied for the call
	Copies        int64 // copies issued (a copy for a unit announced and not run is wasted)
	CopiedBytes   int64 // bytes of those copies
}

// HitRate is the share of announced-unit calls that needed no copy
// (resident or found in a slot); 0 with no calls.
func (s PoolStats) HitRate() float64 {
	if s.Calls == 0 {
		return 0
	}
	return float64(s.ResidentCalls+s.Hits) / float64(s.Calls)
}

func (s *PoolStats) add(o PoolStats) {
	s.Passes += o.Passes
	s.Calls += o.Calls
	s.ResidentCalls += o.ResidentCalls
	s.Hits += o.Hits
	s.Misses += o.Misses
	s.Copies += o.Copies
	s.CopiedBytes += o.CopiedBytes
}

// newPool allocates n slots of slotBytes each. On an error nothing stays
// allocated.
func newPool(dev runtime.Device, copy runtime.Stream, n int, slotBytes int64) (*pool, error) {
	p := &pool{copy: copy, compute: dev.Compute()}
	for s := 0; s < n; s++ {
		buf, err := dev.Alloc(max(slotBytes, 1), fmt.Sprintf("offload pool slot %d", s))
		if err != nil {
			p.free()
			return nil, err
		}
		p.slots = append(p.slots, buf)
	}
	p.holder = make([]*unit, n)
	p.ready = make([]runtime.Event, n)
	p.release = make([]runtime.Event, n)
	p.want = make([]int, n)
	p.busy = make([]bool, n)
	p.last = make([]uint64, n)
	return p, nil
}

// score orders eviction candidates: the lower, the sooner evicted.
func (p *pool) score(s int) (float64, uint64) {
	h := p.holder[s]
	if h == nil {
		return -1, 0
	}
	if p.policy == EvictLRU {
		return 0, p.last[s]
	}
	return h.freq*p.prior + float64(h.seen), p.last[s]
}

// victim picks a slot for a new copy: an empty one, else the policy's
// choice among slots whose holder is neither running nor announced and not
// yet run; with steal, among announced ones too (the copy-on-enter
// fallback). -1 when none may be taken.
func (p *pool) victim(steal bool) int {
	best := -1
	var bs float64
	var bl uint64
	for s := range p.holder {
		if p.busy[s] || (!steal && p.want[s] > 0) {
			continue
		}
		sc, l := p.score(s)
		if best < 0 || sc < bs || (sc == bs && l < bl) {
			best, bs, bl = s, sc, l
		}
	}
	return best
}

// load issues u's copy into a slot (see victim); it returns the slot, or -1
// when none may be taken.
func (p *pool) load(u *unit, steal bool) (int, error) {
	s := p.victim(steal)
	if s < 0 {
		return -1, nil
	}
	p.evict(s)
	if p.release[s] != nil {
		if err := p.copy.Wait(p.release[s]); err != nil {
			return -1, err
		}
	}
	var ct *copyTiming
	if p.timeCopies {
		ct = &copyTiming{bytes: u.bytes}
		var err error
		if ct.start, err = p.copy.Record(); err != nil {
			return -1, err
		}
	}
	if err := p.copy.CopyH2D(p.slots[s], 0, u.host, 0, u.bytes); err != nil {
		return -1, err
	}
	ev, err := p.copy.Record()
	if err != nil {
		return -1, err
	}
	if ct != nil {
		ct.end = ev
	}
	p.ready[s] = ev
	p.hold(s, u)
	u.copied, u.pendingCopy = true, ct
	p.pass.Copies++
	p.pass.CopiedBytes += u.bytes
	return s, nil
}

// evict empties slot s: its holder is no longer in a slot.
func (p *pool) evict(s int) {
	if old := p.holder[s]; old != nil {
		old.pslot, old.copied, old.pendingCopy = -1, false, nil
	}
	p.holder[s], p.want[s] = nil, 0
}

// hold records that slot s holds u (its copy just issued).
func (p *pool) hold(s int, u *unit) {
	p.clock++
	p.holder[s], p.last[s] = u, p.clock
	u.pslot = s
}

// announce issues the copies of the announced units in next (in order) that
// no slot holds, and marks every one of them as wanted so that it is not
// evicted before it runs. It stops issuing when no slot may be taken.
func (p *pool) announce(next []*unit) error {
	full := false
	for _, u := range next {
		s := u.pslot
		if s < 0 && !full {
			var err error
			if s, err = p.load(u, false); err != nil {
				return err
			}
			full = s < 0
		}
		if s >= 0 {
			p.want[s]++
		}
	}
	return nil
}

// enter readies u (streamed, announced) to run: the slot holding it (its
// copy issued now when none does), the compute stream waiting for the copy.
// onWait, when set, runs before the wait with the copy's timing (nil for a
// hit or untimed copies). It returns the slot's buffer.
func (p *pool) enter(u *unit, onWait func(*copyTiming) error) (*runtime.DeviceBuffer, error) {
	s := u.pslot
	if s < 0 {
		var err error
		if s, err = p.load(u, true); err != nil {
			return nil, err
		}
		if s < 0 {
			return nil, fmt.Errorf("offload: no pool slot for unit %s (%d slots, all running)", u.name, len(p.slots))
		}
	}
	p.pass.Calls++
	u.seen++
	if u.copied {
		p.pass.Misses++
	} else {
		p.pass.Hits++
	}
	u.lastHit = !u.copied
	ct := u.pendingCopy
	u.copied, u.pendingCopy = false, nil
	if p.want[s] > 0 {
		p.want[s]--
	}
	p.busy[s] = true
	p.clock++
	p.last[s] = p.clock
	if onWait != nil {
		if err := onWait(ct); err != nil {
			return nil, err
		}
	}
	if p.ready[s] != nil {
		if err := p.compute.Wait(p.ready[s]); err != nil {
			return nil, err
		}
	}
	return p.slots[s], nil
}

// exit records ev, the compute event after u's forward, as its slot's
// release: the slot's next copy waits for it.
func (p *pool) exit(u *unit, ev runtime.Event) {
	if s := u.pslot; s >= 0 {
		p.release[s], p.busy[s] = ev, false
	}
}

// endPass forgets the pass's announcements (advisory: a unit announced and
// not run holds its slot as an ordinary cached unit) and returns the pass's
// counts.
func (p *pool) endPass() PoolStats {
	for s := range p.slots {
		p.want[s], p.busy[s] = 0, false
		if h := p.holder[s]; h != nil {
			h.copied, h.pendingCopy = false, nil
		}
	}
	st := p.pass
	p.pass = PoolStats{}
	return st
}

// reset forgets every slot's contents (after a failed pass: a copy may not
// have completed). The caller has drained the streams.
func (p *pool) reset() {
	for s := range p.slots {
		if h := p.holder[s]; h != nil {
			h.pslot, h.copied, h.pendingCopy = -1, false, nil
		}
		p.holder[s], p.ready[s], p.release[s], p.want[s], p.busy[s], p.last[s] = nil, nil, nil, 0, false, 0
	}
	p.pass = PoolStats{}
}

// bytes is the device memory of the slots.
func (p *pool) bytes() int64 {
	var n int64
	for _, s := range p.slots {
		n += s.Size()
	}
	return n
}

// free returns the slots' device memory and detaches their holders.
func (p *pool) free() {
	for s, b := range p.slots {
		b.Free()
		if p.holder != nil {
			if h := p.holder[s]; h != nil {
				h.pslot, h.copied, h.pendingCopy = -1, false, nil
			}
		}
	}
	p.slots, p.holder = nil, nil
}

// Announce is the engine's nn.Announcer: parent's forward will call next.
// Before INFERENCE it records which units are data-dependent (and how many
// are announced together); in INFERENCE it issues the copies of the
// announced streamed units. It runs inside a forward of the model, which
// holds the manager.
func (e *engine) Announce(parent nn.Module, next []nn.Module) {
	if !e.inForward || e.failed != nil {
		return
	}
	if e.phase != PhaseInference {
		e.announcers[parent] = true
		n := 0
		for i, m := range next {
			if u := e.byMod[m]; u != nil {
				u.announced = true
				if !slices.Contains(next[:i], m) {
					n++
				}
			}
		}
		if e.m.suspended == 0 || e.phase == PhaseDiscovery {
			e.maxAnnounced = max(e.maxAnnounced, n)
		}
		return
	}
	n := 0
	for i, m := range next {
		if u := e.byMod[m]; u != nil && u.announced && !slices.Contains(next[:i], m) {
			n++
		}
	}
	e.annPassMax = max(e.annPassMax, n)
	if e.pool == nil {
		return
	}
	units := e.annScratch[:0]
	for _, m := range next {
		if u := e.byMod[m]; u != nil && u.announced && !u.resident {
			units = append(units, u)
		}
	}
	e.annScratch = units
	if err := e.pool.announce(units); err != nil && e.announceErr == nil {
		e.announceErr = fmt.Errorf("offload: announcing %d units of %s: %w", len(units), parent.Node().Name(), err)
	}
}

// markAnnounced makes every unit under a module that announced children
// data-dependent (a unit the router never chose while profiling is still
// one of its experts).
func (e *engine) markAnnounced() {
	for a := range e.announcers {
		for _, u := range e.units {
			if u.mod != a && under(u.mod, a) {
				u.announced = true
			}
		}
	}
}

// markRepeated makes the units that did not run exactly once in the pass
// just staged data-dependent: a unit skipped, or run twice, cannot take
// part in the cyclic ring, announced or not. A pass in which no unit ran
// (UpdateState after a graph replay, which runs no traps) marks nothing;
// ran reports whether any unit ran.
func (e *engine) markRepeated() (ran bool) {
	for _, u := range e.units {
		ran = ran || len(u.runs) > 0
	}
	if !ran {
		return false
	}
	for _, u := range e.units {
		if len(u.runs) != 1 {
			u.announced = true
		}
	}
	return true
}

// enterPooled is enterInference for a streamed announced unit.
func (e *engine) enterPooled(u *unit, timed bool) error {
	var onWait func(*copyTiming) error
	if timed {
		c := e.dev.Compute()
		onWait = func(ct *copyTiming) error {
			var err error
			u.waitStart, err = c.Record()
			u.copyRec = ct
			return err
		}
	}
	buf, err := e.pool.enter(u, onWait)
	if err != nil {
		return err
	}
	return e.bindPooled(u, buf)
}

// PoolStats reports the calls of announced (data-dependent) units since
// INFERENCE began and what they cost: hits, misses, copies and bytes. It is
// zero before INFERENCE and for a model without announced units.
func (m *Manager) PoolStats() PoolStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.e == nil {
		return PoolStats{}
	}
	return m.e.poolTotal
}

// ResetPoolStats starts the PoolStats counts afresh.
func (m *Manager) ResetPoolStats() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.e != nil {
		m.e.poolTotal = PoolStats{}
	}
}

// endPoolPass ends INFERENCE's pass for the announced units: the pool's
// announcements are forgotten and the pass's counts added to the totals
// (and kept for the pass's timing snapshot).
func (e *engine) endPoolPass() {
	st := e.annPass
	e.annPass = PoolStats{}
	if e.pool != nil {
		st.add(e.pool.endPass())
	}
	st.Passes = 1
	e.poolTotal.add(st)
	e.timing.pool = st
}

// passCalls is one measured INFERENCE pass's calls of announced units and
// the most units one announcement named.
type passCalls struct {
	calls  map[*unit]int
	maxAnn int
}

// passCalls counts the announced units' runs in the pass being measured
// (its timing runs).
func (e *engine) passCalls() passCalls {
	pc := passCalls{calls: map[*unit]int{}, maxAnn: e.annPassMax}
	for _, r := range e.timing.current {
		if r.u.announced {
			pc.calls[r.u]++
		}
	}
	return pc
}

// freqSamples collects the announced units' calls over the passes a
// replan or a token-count plan measures, so that its plan uses the
// frequencies of the workload it is made for (a batch of 16 routes to many
// more experts a layer than one token).
type freqSamples struct {
	passes int
	calls  map[*unit][]float64
	maxAnn int
}

func (f *freqSamples) add(e *engine, pc passCalls) {
	if f.calls == nil {
		f.calls = map[*unit][]float64{}
	}
	f.passes++
	f.maxAnn = max(f.maxAnn, pc.maxAnn)
	for _, u := range e.units {
		if u.announced {
			f.calls[u] = append(f.calls[u], float64(pc.calls[u]))
		}
	}
}

// apply puts the measured frequencies into in (nothing when no pass was
// measured).
func (f *freqSamples) apply(e *engine, in *PlanInput) {
	if f.passes == 0 {
		return
	}
	for _, u := range e.units {
		if c, ok := f.calls[u]; ok {
			in.Units[u.idx].Calls, in.Units[u.idx].RunShare = mean(c), runShare(c)
		}
	}
	in.MaxAnnounced = max(f.maxAnn, 1)
}
