package offload

// The planner: a pure function from (units in execution order with their bytes
// and measured compute time, the H2D copy curve, a device-memory budget and a
// slot count) to a Plan (resident set, transfer-block assignment, prefetch
// order) with its predicted steady-state forward time and peak device bytes.
//
// Unexported names in this file start with "plan" so that the rest of the
// package can grow without collisions.

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// H2DPoint is one measured host-to-device copy: Bytes copied in Seconds.
type H2DPoint struct {
	Bytes   int64
	Seconds float64
}

// H2DCurve models host-to-device copy time as a function of copy size from a
// few measured samples. Points are sorted by strictly increasing Bytes (> 0)
// with finite Seconds >= 0; MakePlan rejects a curve that is not.
//
// Time interpolates linearly between neighbouring points. Outside the sampled
// range it extends the nearest end segment's line, i.e. a latency+bytes/bandwidth
// fit through the two end points: above the last point
//
//	T(b) = T_last + (b - B_last) / bw,  bw = (B_last - B_prev) / (T_last - T_prev),
//
// so large copies run at the last segment's bandwidth; below the first point
// the first segment's line is extended down and clamped at 0. Where an end
// segment is not increasing (noisy samples) or there is a single point, the
// end point's average rate is used instead: T(b) = T_end * b / B_end.
type H2DCurve struct {
	Points []H2DPoint
}

// Time predicts the seconds one host-to-device copy of bytes takes (see H2DCurve
// for the model). Time(b) = 0 for b <= 0 and for a curve with no points.
func (c H2DCurve) Time(bytes int64) float64 {
	pts := c.Points
	if bytes <= 0 || len(pts) == 0 {
		return 0
	}
	x := float64(bytes)
	if len(pts) == 1 {
		return planRate(pts[0], x)
	}
	i := sort.Search(len(pts), func(i int) bool { return pts[i].Bytes >= bytes })
	switch {
	case i < len(pts) && pts[i].Bytes == bytes:
		return pts[i].Seconds
	case i == 0: // below the first point
		a, b := pts[0], pts[1]
		if b.Seconds <= a.Seconds || b.Bytes <= a.Bytes {
			return planRate(a, x)
		}
		return max(0, planLine(a, b, x))
	case i == len(pts): // beyond the last point
		a, b := pts[len(pts)-2], pts[len(pts)-1]
		if b.Seconds <= a.Seconds || b.Bytes <= a.Bytes {
			return planRate(b, x)
		}
		return planLine(a, b, x)
	default:
		return planLine(pts[i-1], pts[i], x)
	}
}

// planLine evaluates the line through a and b at x.
func planLine(a, b H2DPoint, x float64) float64 {
	dx := float64(b.Bytes - a.Bytes)
	if dx <= 0 {
		return a.Seconds
	}
	return a.Seconds + (b.Seconds-a.Seconds)*(x-float64(a.Bytes))/dx
}

// planRate scales p's average rate to x bytes: p.Seconds * x / p.Bytes.
func planRate(p H2DPoint, x float64) float64 {
	if p.Bytes <= 0 {
		return p.Seconds
	}
	return p.Seconds * x / float64(p.Bytes)
}

// validate reports the first problem with the curve's points.
func (c H2DCurve) validate() error {
	for i, p := range c.Points {
		switch {
		case p.Bytes <= 0:
			return fmt.Errorf("offload: plan: H2D curve point %d has %d bytes; want > 0", i, p.Bytes)
		case math.IsNaN(p.Seconds) || math.IsInf(p.Seconds, 0) || p.Seconds < 0:
			return fmt.Errorf("offload: plan: H2D curve point %d (%d bytes) has time %v s; want finite and >= 0", i, p.Bytes, p.Seconds)
		case i > 0 && p.Bytes <= c.Points[i-1].Bytes:
			return fmt.Errorf("offload: plan: H2D curve points are not sorted by strictly increasing bytes (point %d: %d bytes after %d)",
				i, p.Bytes, c.Points[i-1].Bytes)
		}
	}
	return nil
}

// FitH2D returns the curve of a fixed per-copy latency plus a bandwidth:
// Time(b) = latencySec + b/bytesPerSec for every b > 0 (two points, 1 MiB and
// 1 GiB, extended by H2DCurve's rules). It is a convenience for tests and
// benchmarks; it panics if latencySec < 0 or bytesPerSec <= 0 (or either is
// not finite).
func FitH2D(latencySec, bytesPerSec float64) H2DCurve {
	if !(latencySec >= 0) || math.IsInf(latencySec, 0) || !(bytesPerSec > 0) || math.IsInf(bytesPerSec, 0) {
		panic(fmt.Sprintf("offload: FitH2D(%v, %v): want latency >= 0 and bandwidth > 0, both finite", latencySec, bytesPerSec))
	}
	pt := func(b int64) H2DPoint { return H2DPoint{Bytes: b, Seconds: latencySec + float64(b)/bytesPerSec} }
	return H2DCurve{Points: []H2DPoint{pt(1 << 20), pt(1 << 30)}}
}

// PlanUnit is one offloadable unit (for Llama, one decoder layer) in execution
// order: its weights' bytes and its measured compute time for one forward pass.
type PlanUnit struct {
	Name       string
	Bytes      int64
	ComputeSec float64 // per call
	// Announced marks a data-dependent unit (an expert: see pool.go), run
	// Calls times a pass on average (its profiled frequency, which may be
	// 0 or more than 1). A unit that is not announced runs once a pass
	// (Calls is ignored).
	Announced bool
	Calls     float64
	// RunShare is the share of passes in which an announced unit runs at
	// all (0 to 1): a streamed unit not found in the pool is copied once
	// for the calls of a pass, so it costs RunShare copies a pass. 0 with
	// Calls > 0 means min(Calls, 1).
	RunShare float64
	// HostSecPerToken is the unit's compute time on the host CPU for one
	// token (planner_host.go): at Tokens tokens per forward it computes in
	// HostSecPerToken × max(Tokens, 1). 0 means the unit cannot be
	// computed on the host (a two-way plan). Announced units never are.
	HostSecPerToken float64
	// ForceHost places the unit on the host whatever the search finds
	// (Config.HostUnits; it needs a host backend, not a time).
	ForceHost bool
	// CopyBytes, when above 0, is what a copy of the streamed unit moves
	// over the link (its exp4-packed form, Config.StreamExp4): its copy
	// time is Curve's for CopyBytes, and its transfer block holds the packed
	// bytes beside the unpacked ones (Bytes + CopyBytes). 0: the unit
	// travels as it is (Bytes).
	CopyBytes int64
}

// slotNeed is the transfer block bytes unit u needs when streamed: its
// bytes, and its packed copy's beside them (PlanUnit.CopyBytes).
func (u PlanUnit) slotNeed() int64 { return u.Bytes + u.CopyBytes }

// LinkBytes is the bytes a copy of u moves over the link: CopyBytes when
// packed, else Bytes.
func (u PlanUnit) LinkBytes() int64 {
	if u.CopyBytes > 0 {
		return u.CopyBytes
	}
	return u.Bytes
}

// PlanInput is everything the planner needs. One forward pass visits Units in
// order; the next pass starts right after (decode steps back to back).
type PlanInput struct {
	// Units in execution order.
	Units []PlanUnit
	// FixedBytes are always resident but are not units (embeddings, head,
	// activation reserve).
	FixedBytes int64
	// Budget is the device bytes allowed in total:
	// FixedBytes + resident units' bytes + Slots*SlotBytes.
	Budget int64
	// Slots is the number of transfer blocks. 0 means choose the best of 1..4.
	// A plan never uses more slots than it streams units, so Plan.Slots may be
	// smaller than a requested count.
	Slots int
	// Curve predicts each streamed unit's copy time from its bytes.
	Curve H2DCurve
	// TransferScale multiplies every predicted copy time (a safety factor,
	// the "transfer budget scale"); 0 means 1.
	TransferScale float64
	// Tokens is the tokens per forward the compute times were measured at
	// (0: unknown). It does not enter the search; the plan carries it.
	Tokens int
	// MaxAnnounced is the most announced units one announcement named
	// while profiling (an MoE layer's routed experts): the pool slots
	// that let every copy of a layer be issued at once (0: 1).
	MaxAnnounced int
	// HopSec is the time of one crossing of the hidden state between the
	// device and the host (one way): a stretch of consecutive
	// host-computed units pays it twice (planner_host.go).
	HopSec float64
	// HostReadBytesPerSec is the host's DRAM read bandwidth (a STREAM-like
	// read on all the host backend's threads), which the copy engine's
	// reads and the host units' share (planner_share.go). 0: unknown, and a
	// host unit runs at its own rate (HostSecPerToken) whatever the copies.
	HostReadBytesPerSec float64

	// share is set by hostInput: the host units of a three-way plan with
	// their shared-read model (planner_share.go); nil otherwise.
	share *hostShare
}

// Plan says which units stay resident and how the others are streamed.
type Plan struct {
	// Resident[u] is true when unit u stays on the device for good.
	Resident []bool
	// SlotBytes is the size of each transfer block: the largest streamed
	// unit's bytes, with its packed copy's when it has one
	// (PlanUnit.CopyBytes; 0 when nothing is streamed).
	SlotBytes int64
	// Slots is the number of transfer blocks (0 when nothing is streamed).
	Slots int
	// SlotOf[u] is the slot of streamed unit u, -1 for a resident unit. The
	// s-th streamed unit in execution order (s = 0, 1, ...) uses slot
	// s mod Slots, the same slot in every pass.
	SlotOf []int
	// Prefetch is the copy stream's queue for one pass: the streamed units'
	// indices in execution order. Copies run one at a time in this order,
	// pass after pass.
	Prefetch []int
	// PredictedSec is the simulated steady-state forward time (see Simulate).
	PredictedSec float64
	// PeakBytes = FixedBytes + resident units' bytes + Slots*SlotBytes <= Budget.
	PeakBytes int64
	// FloorSec = max(Σ compute, Σ over streamed units of their scaled copy
	// time): no schedule of this resident set can beat it.
	FloorSec float64
	// Tokens is the tokens per forward the plan was made for (PlanInput's):
	// compute grows with the tokens a forward carries, so a plan made at one
	// decode token and one made at a batch of 256 differ. 0: unknown.
	Tokens int

	// The streamed announced units (SlotOf -1, not in Prefetch) share
	// PoolSlots device slots of PoolSlotBytes each (planner_pool.go).
	PoolSlots     int
	PoolSlotBytes int64
	// ExpectedMissRate is the predicted share of the streamed announced
	// units' calls that need a copy, and ExpectedPoolBytes the bytes those
	// copies move per pass.
	ExpectedMissRate  float64
	ExpectedPoolBytes float64

	// Host[u] is true when unit u is computed on the host CPU (its
	// Resident is false and its SlotOf -1); nil in a two-way plan.
	Host []bool
}

// ErrBudget is wrapped by MakePlan's errors when no plan fits the budget.
var ErrBudget = errors.New("device memory budget too small")

// planPasses is how many back-to-back passes Simulate runs; the last one's
// duration is the prediction.
const planPasses = 3

// planMaxAutoSlots is the largest slot count MakePlan tries when Slots is 0.
const planMaxAutoSlots = 4

// planDPBuckets is the resolution of the knapsack over the budget's bytes.
const planDPBuckets = 2048

// planMaxImprove is how many seeds MakePlan improves by local search.
const planMaxImprove = 8

// planWorkCap bounds the local search: at most this many unit-steps (one
// unit of one simulated pass, or one unit of a memory check) over a MakePlan.
const planWorkCap = 5_000_000

// Simulate is the planner's scoring function: the predicted steady-state
// forward time of in.Units with the given resident set and slot count, and
// whether that plan is valid and fits (ok is false for an invalid input, a
// resident slice of the wrong length, slots < 1 while something is streamed,
// or PeakBytes > Budget). The plan uses min(slots, streamed units) slots.
//
// The model is the transfer engine's schedule on two streams:
//
//   - The s-th streamed unit of a pass (s = 0, 1, ..., in execution order)
//     uses slot s mod Slots, the same in every pass.
//   - Copies run one at a time on the copy stream, in execution order, pass
//     after pass. The copy of streamed unit u into slot k starts when the
//     previous copy has finished and the compute of slot k's previous
//     occupant (possibly in the previous pass) has finished; it lasts
//     TransferScale * Curve.Time(u.Bytes).
//   - Compute of unit u starts when the compute of the unit before it
//     (the last unit of the previous pass, for the first unit) has finished
//     and, if u is streamed, when u's copy has finished; it lasts u.ComputeSec.
//
// So the copy stream may run ahead of compute by as many streamed units as
// there are free slots: while a streamed unit computes, the copies of the next
// Slots-1 streamed units can be done or in flight; while a resident unit
// computes, the next Slots. With one slot a streamed unit's copy overlaps only
// resident units' compute. Copies of the next pass's first streamed units
// overlap the tail of the current pass. (The engine matches this by queueing
// copies in Plan.Prefetch order, wrapping into the next pass, each behind an
// event recorded after its slot's previous occupant computed.)
//
// Simulate runs 3 passes from an idle start (all slots free, both streams idle
// at time 0) and returns the duration of the third: the end of its last
// unit's compute minus the end of the second pass's. The first pass pays the
// start-up copy that steady state hides; from the second pass on the pass
// time is periodic (TestPlanSimulateSteadyState checks the third pass against the
// mean of passes 3..30), and never below FloorSec.
func Simulate(in PlanInput, resident []bool, slots int) (sec float64, ok bool) {
	if in.validate() != nil || len(resident) != len(in.Units) {
		return 0, false
	}
	p := newPlanProblem(in)
	if p.curveErr(resident) != nil {
		return 0, false
	}
	e := p.evaluate(resident, slots)
	return e.sec, e.ok
}

// MakePlan chooses the resident set and slot count that minimise the
// predicted forward time (Simulate) with PeakBytes <= Budget, where slots are
// sized to the largest streamed unit. Among plans predicted equally fast it
// prefers fewer streamed bytes, then fewer slots.
//
// If everything fits (FixedBytes + Σ bytes <= Budget) all units are resident.
// Otherwise, for each slot count (in.Slots, or 1..4) and each candidate slot
// size (a distinct unit size; larger units must be resident), a 0/1 knapsack
// over the remaining bytes (2048 buckets, sizes rounded up so that its picks
// always fit) keeps resident the units of most copy time, and a second one
// the most units (fewest copies). Each knapsack choice also gives an evenly
// spread seed: the same number of streamed units, evenly spaced in execution
// order, so that each copy has compute to hide behind. The best seed of each
// slot count, then the next best seeds (8 in all), are improved by
// first-improvement local search scored by Simulate: make a streamed unit
// resident; swap a streamed and a resident unit (nearest pairs first); stream
// a resident unit and refill with the smallest units that fit; make a
// streamed unit resident and stream residents until it fits; stream a
// resident unit. The search stops at a lower bound (Σ compute, or the least
// copy time any seed streams) or after about 5e6 simulated unit-steps
// (tens of milliseconds at most); 32 Llama layers take about 1-3 ms.
//
// Errors: no units; a negative size, time, budget or slot count; a bad curve
// (or none while something must be streamed); and, wrapping ErrBudget, a
// budget below the least plan (leastBudget, planfloor.go: FixedBytes plus
// the largest unit in one transfer block; for a requested slot count, the
// smallest plan with that many slots; with announced units, one pool slot
// more), which the error names with what it is made of.
func MakePlan(in PlanInput) (Plan, error) {
	if err := in.validate(); err != nil {
		return Plan{}, err
	}
	if in.hasAnnounced() {
		return makePoolPlan(in)
	}
	if in.hasHost() {
		return makeHostPlan(in)
	}
	return makeTwoWayPlan(in)
}

// makeTwoWayPlan is MakePlan's resident/streamed search.
func makeTwoWayPlan(in PlanInput) (Plan, error) {
	n := len(in.Units)
	var total int64
	for _, u := range in.Units {
		total += u.Bytes
	}
	p := newPlanProblem(in)
	if in.FixedBytes+total <= in.Budget {
		all := make([]bool, n)
		for i := range all {
			all[i] = true
		}
		return p.plan(all, 0), nil
	}
	if f := leastBudget(in); f.bytes > in.Budget {
		return Plan{}, f.budgetErr(in.Budget)
	}
	if len(in.Curve.Points) == 0 {
		return Plan{}, fmt.Errorf("offload: plan: the H2D curve has no points but not all %d units fit the budget (%d bytes), so some must be streamed", n, in.Budget)
	}
	res, slots, ok := p.search(in.Slots)
	if !ok { // not expected: the search tries the plan leastBudget counts
		f := leastBudget(in)
		return Plan{}, fmt.Errorf("offload: plan: %w: no plan found under a budget of %d bytes, although the least plan needs %d bytes (%s)",
			ErrBudget, in.Budget, f.bytes, f.describe(planBytes))
	}
	return p.plan(res, slots), nil
}

// validate checks the input's shape and signs (not the budget's feasibility).
func (in *PlanInput) validate() error {
	if len(in.Units) == 0 {
		return errors.New("offload: plan: no units")
	}
	for i, u := range in.Units {
		if u.Bytes < 0 || u.CopyBytes < 0 {
			return fmt.Errorf("offload: plan: unit %d %q has negative size %d bytes (copies of %d)", i, u.Name, u.Bytes, u.CopyBytes)
		}
		if math.IsNaN(u.ComputeSec) || math.IsInf(u.ComputeSec, 0) || u.ComputeSec < 0 {
			return fmt.Errorf("offload: plan: unit %d %q has compute time %v s; want finite and >= 0", i, u.Name, u.ComputeSec)
		}
		if u.Announced && (math.IsNaN(u.Calls) || math.IsInf(u.Calls, 0) || u.Calls < 0) {
			return fmt.Errorf("offload: plan: announced unit %d %q has %v calls per pass; want finite and >= 0", i, u.Name, u.Calls)
		}
		if math.IsNaN(u.HostSecPerToken) || math.IsInf(u.HostSecPerToken, 0) || u.HostSecPerToken < 0 {
			return fmt.Errorf("offload: plan: unit %d %q has host compute time %v s a token; want finite and >= 0", i, u.Name, u.HostSecPerToken)
		}
		if u.Announced && !(u.RunShare >= 0 && u.RunShare <= 1) {
			return fmt.Errorf("offload: plan: announced unit %d %q runs in a share %v of passes; want 0 to 1", i, u.Name, u.RunShare)
		}
	}
	switch {
	case in.FixedBytes < 0:
		return fmt.Errorf("offload: plan: negative fixed bytes %d", in.FixedBytes)
	case in.Budget < 0:
		return fmt.Errorf("offload: plan: negative budget %d bytes", in.Budget)
	case in.Slots < 0:
		return fmt.Errorf("offload: plan: negative slot count %d", in.Slots)
	case math.IsNaN(in.HopSec) || math.IsInf(in.HopSec, 0) || in.HopSec < 0:
		return fmt.Errorf("offload: plan: hop time %v s; want finite and >= 0", in.HopSec)
	case math.IsNaN(in.HostReadBytesPerSec) || math.IsInf(in.HostReadBytesPerSec, 0) || in.HostReadBytesPerSec < 0:
		return fmt.Errorf("offload: plan: host read bandwidth %v bytes/s; want finite and >= 0", in.HostReadBytesPerSec)
	case in.MaxAnnounced < 0:
		return fmt.Errorf("offload: plan: negative MaxAnnounced %d", in.MaxAnnounced)
	case math.IsNaN(in.TransferScale) || math.IsInf(in.TransferScale, 0) || in.TransferScale < 0:
		return fmt.Errorf("offload: plan: transfer scale %v; want finite and >= 0", in.TransferScale)
	}
	return in.Curve.validate()
}

// planProblem is a PlanInput digested for fast repeated simulation.
type planProblem struct {
	in       *PlanInput
	n        int
	bytes    []int64
	slot     []int64 // transfer block bytes each unit needs when streamed (PlanUnit.slotNeed)
	comp     []float64
	xfer     []float64 // scaled copy seconds per unit
	sumComp  float64
	slotFree []float64 // simulate's scratch: compute end of each slot's last occupant
	work     int64     // unit-steps of simulation left for local search

	share   *hostShare // host units sharing DRAM reads with the copies (planner_share.go), or nil
	crate   []float64  // with share: each unit's copy rate, bytes a second (0: no copy time)
	scratch shareScratch
	hostDur []float64 // with share, when non-nil: each host unit's last simulated run (work and sharing, no hops)
}

// newPlanProblem precomputes per-unit bytes, compute and scaled copy times.
func newPlanProblem(in PlanInput) *planProblem {
	scale := in.TransferScale
	if scale == 0 {
		scale = 1
	}
	n := len(in.Units)
	p := &planProblem{in: &in, n: n, bytes: make([]int64, n), slot: make([]int64, n), comp: make([]float64, n), xfer: make([]float64, n),
		work: planWorkCap}
	for i, u := range in.Units {
		p.bytes[i] = u.Bytes
		p.slot[i] = u.slotNeed()
		p.comp[i] = u.ComputeSec
		p.xfer[i] = scale * in.Curve.Time(u.LinkBytes())
		p.sumComp += u.ComputeSec
	}
	p.initShare()
	return p
}

// curveErr reports a missing curve when res streams something.
func (p *planProblem) curveErr(res []bool) error {
	if len(p.in.Curve.Points) == 0 && slices.Contains(res, false) {
		return errors.New("offload: plan: the H2D curve has no points but units are streamed")
	}
	return nil
}

// planEval is one scored candidate.
type planEval struct {
	ok       bool
	sec      float64
	streamed int64   // bytes copied per pass
	xfer     float64 // seconds of copies per pass
	slots    int     // effective slots
	peak     int64
}

// better reports whether a beats b: faster (beyond a relative 1e-9), then
// fewer streamed bytes, fewer slots, less peak memory.
func (a planEval) better(b planEval) bool {
	if !a.ok || !b.ok {
		return a.ok && !b.ok
	}
	tol := 1e-9 * max(a.sec, b.sec)
	switch {
	case a.sec < b.sec-tol:
		return true
	case a.sec > b.sec+tol:
		return false
	case a.streamed != b.streamed:
		return a.streamed < b.streamed
	case a.slots != b.slots:
		return a.slots < b.slots
	}
	return a.peak < b.peak
}

// evaluate scores res with up to slots slots.
func (p *planProblem) evaluate(res []bool, slots int) planEval {
	var resBytes, maxS, str int64
	var xfer float64
	m := 0
	for u, r := range res {
		if r {
			resBytes += p.bytes[u]
		} else {
			m++
			str += p.bytes[u]
			xfer += p.xfer[u]
			maxS = max(maxS, p.slot[u])
		}
	}
	if m == 0 {
		e := planEval{ok: true, sec: p.sumComp, peak: p.in.FixedBytes + resBytes}
		e.ok = e.peak <= p.in.Budget
		return e
	}
	if slots < 1 {
		return planEval{}
	}
	s := min(slots, m)
	e := planEval{streamed: str, xfer: xfer, slots: s, peak: p.in.FixedBytes + resBytes + int64(s)*maxS}
	if e.peak > p.in.Budget {
		return planEval{}
	}
	e.ok = true
	e.sec = p.simulate(res, s)
	p.work -= int64(planPasses * p.n)
	return e
}

// simulate runs planPasses passes of the two-stream schedule documented on
// Simulate with exactly slots slots (>= 1 when something is streamed) and
// returns the last pass's duration.
func (p *planProblem) simulate(res []bool, slots int) float64 {
	var ends [planPasses]float64
	p.passes(res, slots, ends[:])
	return ends[planPasses-1] - ends[planPasses-2]
}

// passes simulates len(ends) back-to-back passes from an idle start and
// stores the time each pass's last compute ends.
func (p *planProblem) passes(res []bool, slots int, ends []float64) {
	if p.share != nil {
		p.passesShare(res, slots, ends)
		return
	}
	if cap(p.slotFree) < slots {
		p.slotFree = make([]float64, slots)
	}
	free := p.slotFree[:slots]
	clear(free)
	var copyEnd, compEnd float64
	xfer, comp := p.xfer[:len(res)], p.comp[:len(res)]
	for pass := range ends {
		s := 0 // slot of the next streamed unit
		for u, r := range res {
			if r {
				compEnd += comp[u]
				continue
			}
			copyEnd = max(copyEnd, free[s]) + xfer[u]
			compEnd = max(compEnd, copyEnd) + comp[u]
			free[s] = compEnd
			if s++; s == slots {
				s = 0
			}
		}
		ends[pass] = compEnd
	}
}

// plan turns a chosen resident set into a Plan.
func (p *planProblem) plan(res []bool, slots int) Plan {
	e := p.evaluate(res, slots)
	pl := Plan{
		Resident:     slices.Clone(res),
		Slots:        e.slots,
		SlotOf:       make([]int, p.n),
		PredictedSec: e.sec,
		PeakBytes:    e.peak,
		Tokens:       p.in.Tokens,
	}
	var xfer float64
	for u, r := range res {
		pl.SlotOf[u] = -1
		if !r {
			pl.SlotOf[u] = len(pl.Prefetch) % e.slots
			pl.Prefetch = append(pl.Prefetch, u)
			pl.SlotBytes = max(pl.SlotBytes, p.slot[u])
			xfer += p.xfer[u]
		}
	}
	pl.FloorSec = max(p.sumComp, xfer)
	return pl
}

// planCand is a candidate plan: resident set, requested slots, score.
type planCand struct {
	res   []bool
	slots int
	e     planEval
}

// search returns the best resident set and slot count it finds; ok is false
// when no candidate fits the budget.
func (p *planProblem) search(reqSlots int) ([]bool, int, bool) {
	slotCands := []int{reqSlots}
	if reqSlots == 0 {
		slotCands = make([]int, planMaxAutoSlots)
		for i := range slotCands {
			slotCands[i] = i + 1
		}
	}
	// Collect distinct feasible seeds.
	var cands []planCand
	seen := map[string]bool{}
	key := make([]byte, p.n+1)
	emit := func(s int, r []bool) {
		for u, x := range r {
			key[u] = '0'
			if x {
				key[u] = '1'
			}
		}
		key[p.n] = byte(s)
		if seen[string(key)] {
			return
		}
		seen[string(key)] = true
		if e := p.evaluate(r, s); e.ok {
			cands = append(cands, planCand{slices.Clone(r), s, e})
		}
	}
	// Knapsack values: keep the most copy time resident (fewest streamed
	// seconds), or the most units resident (fewest copies, each of which may
	// stall compute), ties broken by copy time.
	var maxX float64
	for _, x := range p.xfer {
		maxX = max(maxX, x)
	}
	p.seeds(slotCands, func(u int) float64 { return p.xfer[u] }, emit)
	p.seeds(slotCands, func(u int) float64 { return 1 + 1e-3*p.xfer[u]/max(maxX, 1e-300) }, emit)
	if len(cands) == 0 {
		return nil, 0, false
	}
	sort.SliceStable(cands, func(a, b int) bool { return cands[a].e.better(cands[b].e) })

	// Improve the best seed of each slot count, then the next best seeds
	// overall, while the work budget lasts.
	var picked []int
	done := map[int]bool{}
	for _, s := range slotCands {
		for i, c := range cands {
			if c.slots == s {
				picked, done[i] = append(picked, i), true
				break
			}
		}
	}
	for i := range cands {
		if len(picked) >= planMaxImprove {
			break
		}
		if !done[i] {
			picked = append(picked, i)
		}
	}
	// No plan beats Σ compute, nor (up to the knapsack's rounding, which
	// the add moves undo) the least copy time of any seed.
	lb := math.Inf(1)
	for _, c := range cands {
		lb = min(lb, c.e.xfer)
	}
	lb = max(lb, p.sumComp)
	// Per slot count, no plan beats the least copy time its seeds stream
	// (same caveat); skip seeds that cannot even tie the best plan so far.
	lbSlots := map[int]float64{}
	for _, c := range cands {
		if v, ok := lbSlots[c.slots]; !ok || c.e.xfer < v {
			lbSlots[c.slots] = c.e.xfer
		}
	}
	best, res, slots := cands[0].e, slices.Clone(cands[0].res), cands[0].slots
	for _, i := range picked {
		c := cands[i]
		if p.work <= 0 || best.sec <= lb*(1+1e-12) {
			break
		}
		if max(p.sumComp, lbSlots[c.slots]) > best.sec*(1+1e-9) {
			continue
		}
		e := p.improve(c.res, c.slots, c.e, lb)
		if e.better(best) {
			best, res, slots = e, c.res, c.slots
		}
	}
	// At the bound the loop may not have run: still make resident whatever
	// the knapsack's rounding left out (fewer streamed bytes at equal time).
	p.improve(res, slots, best, lb)
	return res, slots, best.ok
}

// seeds calls emit(slots, res) with knapsack and evenly spread resident sets
// for every candidate slot count and every slot size (distinct unit size).
// The knapsack keeps resident the units of most total value(u).
func (p *planProblem) seeds(slotCands []int, value func(u int) float64, emit func(slots int, res []bool)) {
	in := p.in
	room := in.Budget - in.FixedBytes // > 0: the largest unit fits
	bucket := max(1, (room+planDPBuckets-1)/planDPBuckets)
	W := int(room / bucket)

	// Units sorted by size; zero-byte units are always resident.
	var order []int
	for u, b := range p.bytes {
		if b > 0 {
			order = append(order, u)
		}
	}
	sort.SliceStable(order, func(a, b int) bool { return p.bytes[order[a]] < p.bytes[order[b]] })
	suffix := make([]int64, len(order)+1) // suffix[i] = Σ bytes of order[i:]
	for i := len(order) - 1; i >= 0; i-- {
		suffix[i] = suffix[i+1] + p.bytes[order[i]]
	}

	// 0/1 knapsack over a growing prefix of size-sorted units, sizes rounded
	// up to buckets: dp[w] is the most value kept resident within w buckets;
	// keep[i][w] records the choices for reconstruction after any prefix.
	wt := make([]int, len(order))
	dp := make([]float64, W+1)
	keep := make([]bool, len(order)*(W+1))
	res := make([]bool, p.n)
	var maxSlot int64 // the transfer block the units so far need when streamed
	for i, u := range order {
		maxSlot = max(maxSlot, p.slot[u])
		wt[i] = int(min(int64(W)+1, (p.bytes[u]+bucket-1)/bucket))
		row := keep[i*(W+1) : (i+1)*(W+1)]
		val := value(u)
		for w := W; w >= wt[i]; w-- {
			if v := dp[w-wt[i]] + val; v > dp[w] {
				dp[w] = v
				row[w] = true
			}
		}
		if i+1 < len(order) && p.bytes[order[i+1]] == p.bytes[u] {
			continue // not the last unit of this size
		}
		// Slot size = this size (with packed copies beside, the most any of
		// them needs): units order[:i+1] may be streamed, larger ones are
		// resident.
		size := maxSlot
		for _, s := range slotCands {
			rem := room - suffix[i+1] - int64(min(s, i+1))*size
			if rem < 0 {
				continue
			}
			for v := range res {
				res[v] = true
			}
			for _, v := range order[:i+1] {
				res[v] = false
			}
			w := int(min(int64(W), rem/bucket))
			for j := i; j >= 0; j-- {
				if keep[j*(W+1)+w] {
					res[order[j]] = true
					w -= wt[j]
				}
			}
			emit(s, res)
			p.spread(res, order[:i+1])
			emit(s, res)
		}
	}
}

// spread rewrites res so that as many of the streamable units as res streams
// are streamed, evenly spaced in execution order among them.
func (p *planProblem) spread(res []bool, streamable []int) {
	el := slices.Clone(streamable)
	slices.Sort(el)
	m := 0
	for _, u := range el {
		if !res[u] {
			m++
		}
		res[u] = true
	}
	for k := range m {
		res[el[(2*k+1)*len(el)/(2*m)]] = false
	}
}

// evict streams resident units other than keep (in bySize order, smallest
// first, or best fit) until res fits the budget or nothing is left to stream.
func (p *planProblem) evict(res []bool, slots int, keep int, bySize []int, bestFit bool) {
	for {
		over, maxS := p.over(res, slots)
		if over <= 0 {
			return
		}
		pick := -1
		for _, r := range bySize {
			if !res[r] || r == keep || p.bytes[r] == 0 {
				continue
			}
			if !bestFit {
				pick = r
				break
			}
			if p.bytes[r] <= maxS {
				pick = r // the largest so far that keeps the slot size
			}
			if p.bytes[r] >= over {
				pick = r
				break
			}
		}
		if pick < 0 {
			return
		}
		res[pick] = false
	}
}

// over returns by how many bytes res with up to slots slots exceeds the
// budget (<= 0: it fits) and the largest streamed unit's bytes.
func (p *planProblem) over(res []bool, slots int) (int64, int64) {
	p.work -= int64(p.n)
	var resBytes, maxS int64
	m := 0
	for u, r := range res {
		if r {
			resBytes += p.bytes[u]
		} else {
			m++
			maxS = max(maxS, p.bytes[u])
		}
	}
	return p.in.FixedBytes + resBytes + int64(min(slots, m))*maxS - p.in.Budget, maxS
}

// fits reports whether res with up to slots slots fits the budget.
func (p *planProblem) fits(res []bool, slots int) bool {
	over, _ := p.over(res, slots)
	return over <= 0
}

// improve runs first-improvement local search from res (modified in place)
// with slots slots and returns the final score. Moves: make a streamed unit
// resident; swap a streamed and a resident unit; stream a resident unit and
// refill the freed bytes with the smallest streamed units that fit (this
// trades one large resident unit for several small ones, or changes the slot
// size); make a streamed unit resident and stream resident units until it
// fits (the reverse trade; smallest first or best fit); stream a resident unit.
//
// lb is a lower bound on the time of any plan (Σ compute, or the least copy
// time any seed streams): the search stops when it reaches it.
func (p *planProblem) improve(res []bool, slots int, cur planEval, lb float64) planEval {
	try := func() bool {
		if e := p.evaluate(res, slots); e.better(cur) {
			cur = e
			return true
		}
		return false
	}
	bySize := make([]int, p.n)
	for i := range bySize {
		bySize[i] = i
	}
	sort.SliceStable(bySize, func(a, b int) bool { return p.bytes[bySize[a]] < p.bytes[bySize[b]] })
	saved := make([]bool, p.n)
	for p.work > 0 {
		moved := false
		for u := range res {
			if !res[u] {
				if res[u] = true; try() {
					moved = true
				} else {
					res[u] = false
				}
			}
		}
		if cur.sec <= lb*(1+1e-12) {
			break // at the lower bound: nothing is faster
		}
		// At the copy floor only moves that stream less copy time can help.
		atFloor := cur.sec <= cur.xfer*(1+1e-12)
		// Swaps, nearest pairs first so that spreading moves come early.
		for d := 1; d < p.n && p.work > 0; d++ {
			for s := range res {
				if res[s] {
					continue
				}
				for _, r := range [2]int{s - d, s + d} {
					if r < 0 || r >= p.n || !res[r] || p.bytes[r] == 0 || (atFloor && p.xfer[r] >= p.xfer[s]) {
						continue
					}
					res[s], res[r] = true, false
					if try() {
						moved = true
						break
					}
					res[s], res[r] = false, true
				}
			}
		}
		// Stream r, refill with the smallest streamed units that fit.
		for r := range res {
			if !res[r] || p.bytes[r] == 0 || p.work <= 0 {
				continue
			}
			copy(saved, res)
			res[r] = false
			for _, u := range bySize {
				if !res[u] && u != r {
					if res[u] = true; !p.fits(res, slots) {
						res[u] = false
					}
				}
			}
			if try() {
				moved = true
			} else {
				copy(res, saved)
			}
		}
		// Make u resident and stream resident units until it fits: the
		// smallest first, or best fit (the smallest unit that covers the
		// missing bytes, else the largest that keeps the slot size).
		for u := range res {
			for _, bestFit := range [2]bool{false, true} {
				if res[u] || p.work <= 0 {
					continue
				}
				copy(saved, res)
				res[u] = true
				p.evict(res, slots, u, bySize, bestFit)
				if try() {
					moved = true
				} else {
					copy(res, saved)
				}
			}
		}
		// Stream a resident unit (changes the slot phase at the pass boundary).
		for u := range res {
			if res[u] && p.bytes[u] > 0 && p.work > 0 && !atFloor {
				if res[u] = false; try() {
					moved = true
				} else {
					res[u] = true
				}
			}
		}
		if !moved {
			break
		}
	}
	return cur
}

// String formats a plan as one line per unit, for logs and test failures.
func (pl Plan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "plan: predicted %.3f ms (floor %.3f ms), peak %d bytes, %d slots of %d bytes\n",
		pl.PredictedSec*1e3, pl.FloorSec*1e3, pl.PeakBytes, pl.Slots, pl.SlotBytes)
	if pl.PoolSlots > 0 {
		fmt.Fprintf(&b, "  pool: %d slots of %d bytes, expected miss rate %.3f, %.0f bytes copied per pass\n",
			pl.PoolSlots, pl.PoolSlotBytes, pl.ExpectedMissRate, pl.ExpectedPoolBytes)
	}
	for u, r := range pl.Resident {
		switch {
		case pl.IsHost(u):
			fmt.Fprintf(&b, "  %3d host\n", u)
		case r:
			fmt.Fprintf(&b, "  %3d resident\n", u)
		case u < len(pl.SlotOf) && pl.SlotOf[u] < 0:
			fmt.Fprintf(&b, "  %3d pool\n", u)
		default:
			fmt.Fprintf(&b, "  %3d slot %d\n", u, pl.SlotOf[u])
		}
	}
	return b.String()
}
