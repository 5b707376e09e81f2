package offload

import "slices"

// Shared host-memory reads. The copy engine's host-to-device copies read
// the streamed units' pinned blocks from the same DRAM the host cores read
// the host units' weights from. Measured on the H200 machine: a host-placed
// Llama-3-8B layer (436 MB) takes 3.1-3.2 ms alone (~140 GB/s, the
// STREAM-like figure) but 4.9-5.5 ms while the copy engine streams at
// ~55 GB/s: together they read ~140 GB/s, no more.
//
// So with PlanInput.HostReadBytesPerSec = D set, a three-way plan's
// forward is simulated with a host unit's progress depending on the copy
// stream (passesShare):
//
//   - A host unit u has work a_u = HostSecPerToken × max(Tokens, 1) (its
//     time alone) and reads Bytes_u, so alone it reads at R_u = Bytes_u/a_u.
//   - While no copy runs it progresses at its alone rate (1 s of work a
//     second). While a copy of rate C (bytes over its predicted time) runs,
//     it reads at min(R_u, max(D − C, D/10)): it progresses at that over R_u
//     (the D/10 floor keeps a DRAM figure at or below the copy rate from
//     stalling it forever). Copies keep their predicted time.
//   - The schedule is the engine's (ring.go, engine.go, decoder's
//     hostrun.go): units run in order on one compute chain; a host stretch
//     starts when the device's work so far is done (the hidden state's copy
//     to the host synchronises the compute stream) plus one hop, its units
//     run one after another on the host, and the device resumes one hop
//     after its last. Copies run one at a time on the copy stream in
//     Plan.Prefetch order, pass after pass; the copy of the g-th streamed
//     unit (over passes) starts when the previous copy is done and the
//     streamed unit g−Slots (its slot's previous occupant) has computed. So
//     during a host stretch exactly the copies whose slot was released
//     before the stretch run (the ring has issued them, and no streamed
//     unit computes while the host does); the others wait for the stretch
//     to end.
//
// Without D (0), or without copies, host units run at their alone rate:
// the schedule is Simulate's, where a host unit is a resident step of its
// host time plus hops (planner_host.go).
//
// The measured in-hybrid host times (host_measure.go) already contain the
// sharing; hostAloneTimes turns them back into alone times under this model
// before they enter a plan input, so the sharing is not counted twice.

// hostShareMinFrac is the least share of the DRAM read bandwidth a host
// unit keeps while a copy runs.
const hostShareMinFrac = 0.1

// hostShare is the shared-read model's per-unit data of a three-way input
// (set by hostInput on the transformed input, whose host units have 0
// bytes and their host time plus hops as compute).
type hostShare struct {
	dram          float64   // D, bytes a second
	host          []bool    // computed on the host
	work          []float64 // host seconds alone (tokens included)
	hopIn, hopOut []float64 // hops the unit pays before and after its work
	rate          []float64 // alone read rate, bytes a second (0: reads nothing)
}

// shareScratch is passesShare's reusable memory.
type shareScratch struct {
	order  []int
	copies []shareCopy
	doneAt []float64
}

// shareCopy is one simulated copy: when it runs and its read rate.
type shareCopy struct {
	start, end, rate float64
}

// newHostShare builds the model for in's units with host placed on the
// host (nil when in has no DRAM figure or host places nothing).
func newHostShare(in PlanInput, host []bool) *hostShare {
	if in.HostReadBytesPerSec <= 0 || !slices.Contains(host, true) {
		return nil
	}
	n := len(in.Units)
	sh := &hostShare{dram: in.HostReadBytesPerSec, host: slices.Clone(host), work: make([]float64, n),
		hopIn: make([]float64, n), hopOut: make([]float64, n), rate: make([]float64, n)}
	for u := range in.Units {
		if !host[u] {
			continue
		}
		sh.work[u] = in.hostSec(u)
		if u == 0 || !host[u-1] {
			sh.hopIn[u] = in.HopSec
		}
		if u == n-1 || !host[u+1] {
			sh.hopOut[u] = in.HopSec
		}
		if sh.work[u] > 0 {
			sh.rate[u] = float64(in.Units[u].Bytes) / sh.work[u]
		}
	}
	return sh
}

// initShare digests in.share for the simulation.
func (p *planProblem) initShare() {
	sh := p.in.share
	if sh == nil || len(sh.host) != p.n {
		return
	}
	p.share = sh
	p.crate = make([]float64, p.n)
	for u := range p.n {
		if p.xfer[u] > 0 {
			p.crate[u] = float64(p.in.Units[u].LinkBytes()) / p.xfer[u] // the host memory a copy reads
		}
	}
}

// speed is host unit u's progress (seconds of work a second) while a copy
// of read rate c runs.
func (sh *hostShare) speed(u int, c float64) float64 {
	if c <= 0 || sh.rate[u] <= 0 {
		return 1
	}
	avail := max(sh.dram-c, hostShareMinFrac*sh.dram)
	return min(1, avail/sh.rate[u])
}

// passesShare is passes for an input with a shared-read model (see the
// comment at the top of this file); host units are resident in res.
func (p *planProblem) passesShare(res []bool, slots int, ends []float64) {
	sh := p.share
	sc := &p.scratch
	order := sc.order[:0]
	for u, r := range res {
		if !r {
			order = append(order, u)
		}
	}
	sc.order = order
	m := len(order)
	// Copies of one more pass: the last pass's host units run beside the
	// next pass's first copies, as in every other pass.
	total := m * (len(ends) + 1)
	copies := sc.copies[:0]
	if cap(sc.doneAt) < total {
		sc.doneAt = make([]float64, total)
	}
	doneAt := sc.doneAt[:total]
	computed := 0 // streamed units computed so far, over passes
	var copyEnd, compEnd float64
	// issue schedules every copy whose slot's previous occupant has computed.
	issue := func() {
		for len(copies) < total {
			g := len(copies)
			free := 0.0
			if g >= slots {
				if g-slots >= computed {
					return
				}
				free = doneAt[g-slots]
			}
			u := order[g%m]
			start := max(copyEnd, free)
			copyEnd = start + p.xfer[u]
			copies = append(copies, shareCopy{start, copyEnd, p.crate[u]})
		}
	}
	first := 0 // copies before first end before compEnd
	for pass := range ends {
		for u, r := range res {
			switch {
			case !r:
				issue()
				compEnd = max(compEnd, copies[computed].end) + p.comp[u]
				doneAt[computed] = compEnd
				computed++
			case sh.host[u]:
				issue()
				t0 := compEnd + sh.hopIn[u]
				t := p.hostRun(u, t0, copies, &first)
				if p.hostDur != nil {
					p.hostDur[u] = t - t0
				}
				compEnd = t + sh.hopOut[u]
			default:
				compEnd += p.comp[u]
			}
		}
		ends[pass] = compEnd
	}
	sc.copies = copies
}

// hostRun returns when host unit u, started at t, ends: its work runs at
// speed 1 outside the copies and at sh.speed inside them. copies are in
// time order and do not overlap; *first skips those that ended before t.
func (p *planProblem) hostRun(u int, t float64, copies []shareCopy, first *int) float64 {
	sh := p.share
	w := sh.work[u]
	i := *first
	for i < len(copies) && copies[i].end <= t {
		i++
	}
	*first = i
	for w > 0 {
		if i >= len(copies) || copies[i].start >= t+w {
			return t + w
		}
		c := copies[i]
		if c.start > t {
			w -= c.start - t
			t = c.start
		}
		v := sh.speed(u, c.rate)
		if span := c.end - t; span*v >= w {
			return t + w/v
		}
		w -= (c.end - t) * v
		t = c.end
		i++
	}
	return t
}

// hostRunTimes simulates plan pl of in (a three-way plan) and returns each
// host unit's predicted run in steady state (its work under the shared-read
// model, without hops; 0 for other units) and the forward's prediction. ok
// is false when pl does not fit in.
func hostRunTimes(in PlanInput, pl Plan) (runs []float64, sec float64, ok bool) {
	if len(pl.Host) != len(in.Units) || len(pl.Resident) != len(in.Units) {
		return nil, 0, false
	}
	res := slices.Clone(pl.Resident)
	for u, h := range pl.Host {
		if h && res[u] {
			return nil, 0, false
		}
		res[u] = res[u] || h
	}
	tin := hostInput(in, pl.Host)
	if tin.validate() != nil {
		return nil, 0, false
	}
	p := newPlanProblem(tin)
	if p.curveErr(res) != nil {
		return nil, 0, false
	}
	runs = make([]float64, len(in.Units))
	if p.share == nil || slices.Equal(res, slices.Repeat([]bool{true}, len(res))) {
		// No copies or no DRAM figure: every host unit runs alone.
		for u, h := range pl.Host {
			if h {
				runs[u] = in.hostSec(u)
			}
		}
		e := p.evaluate(res, max(pl.Slots, 1))
		return runs, e.sec, e.ok
	}
	p.hostDur = runs
	e := p.evaluate(res, max(pl.Slots, 1))
	return runs, e.sec, e.ok
}

// hostAloneTimes turns host seconds per token measured inside the forward
// of plan pl (meas, by unit index) back into the alone times the model
// takes (HostSecPerToken), so that the sharing the measurement contains is
// not counted twice. It finds the one factor k on in's host times (units
// of a model share their shape) under which the model's median ratio of
// measured to simulated runs is 1 — the factor nearest 1 when a range fits
// (a unit limited by the DRAM throughout runs as long whatever its alone
// time) — and divides each unit's measurement by its simulated stretch
// (run over alone time) at k. Without a DRAM figure or copies the stretch
// is 1 and the measurements are returned as they are.
func hostAloneTimes(in PlanInput, pl Plan, meas map[int]float64) map[int]float64 {
	out := make(map[int]float64, len(meas))
	for u, s := range meas {
		out[u] = s
	}
	if in.HostReadBytesPerSec <= 0 || len(meas) == 0 || len(pl.Host) != len(in.Units) {
		return out
	}
	tok := float64(max(in.Tokens, 1))
	scaled := func(k float64) PlanInput {
		c := in
		c.Units = slices.Clone(in.Units)
		for u := range c.Units {
			if pl.Host[u] {
				c.Units[u].HostSecPerToken *= k
			}
		}
		return c
	}
	// ratio is the median measured/simulated run at factor k (ok false
	// when the plan cannot be simulated).
	ratio := func(k float64) (float64, []float64, bool) {
		runs, _, ok := hostRunTimes(scaled(k), pl)
		if !ok {
			return 0, nil, false
		}
		var rs []float64
		for u, s := range meas {
			if u >= 0 && u < len(runs) && runs[u] > 0 {
				rs = append(rs, s*tok/runs[u])
			}
		}
		if len(rs) == 0 {
			return 0, nil, false
		}
		return median(rs), runs, true
	}
	r1, _, ok := ratio(1)
	if !ok {
		return out
	}
	k := 1.0
	const tol = 1e-4
	switch {
	case r1 > 1+tol: // runs longer than simulated: the smallest k > 1 that fits
		lo, hi := 1.0, 2.0
		for i := 0; i < 20; i++ {
			if r, _, ok := ratio(hi); !ok || r <= 1 {
				break
			}
			lo, hi = hi, hi*2
		}
		for range 50 {
			mid := (lo + hi) / 2
			if r, _, ok := ratio(mid); ok && r > 1 {
				lo = mid
			} else {
				hi = mid
			}
		}
		k = hi
	case r1 < 1-tol: // shorter: the largest k < 1 that fits
		lo, hi := 0.5, 1.0
		for i := 0; i < 20; i++ {
			if r, _, ok := ratio(lo); !ok || r >= 1 {
				break
			}
			lo, hi = lo/2, lo
		}
		for range 50 {
			mid := (lo + hi) / 2
			if r, _, ok := ratio(mid); ok && r < 1 {
				hi = mid
			} else {
				lo = mid
			}
		}
		k = lo
	}
	_, runs, ok := ratio(k)
	if !ok {
		return out
	}
	for u, s := range meas {
		if u < 0 || u >= len(runs) || runs[u] <= 0 {
			continue
		}
		alone := in.Units[u].HostSecPerToken * k * tok
		out[u] = s * alone / runs[u]
	}
	return out
}

// hostFloor is FloorSec of three-way plan pl under in (Σ compute with host
// units at their alone time plus hops, or the streamed copies' time).
func hostFloor(in PlanInput, pl Plan) (float64, bool) {
	if len(pl.Host) != len(in.Units) || len(pl.Resident) != len(in.Units) {
		return 0, false
	}
	res := slices.Clone(pl.Resident)
	for u, h := range pl.Host {
		res[u] = res[u] || h
	}
	p := newPlanProblem(hostInput(in, pl.Host))
	var xfer float64
	for u, r := range res {
		if !r {
			xfer += p.xfer[u]
		}
	}
	return max(p.sumComp, xfer), true
}
