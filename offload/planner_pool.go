package offload

// The planner's part for announced (data-dependent) units: the experts of a
// mixture of experts, served by the pool of device slots (pool.go).

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
)

// copies is the copies a pass an announced unit costs when it is not in
// the pool: one for each pass it runs in.
func (u PlanUnit) copies() float64 {
	if u.RunShare > 0 {
		return u.RunShare
	}
	return min(u.Calls, 1)
}

// poolForceHostErr is the pool plan's error for an input with announced
// units and a unit forced onto the host (the first such), or nil: host
// placement does not combine with announced units yet. The engine's
// pre-flight check (leastPlan) returns the same error.
func poolForceHostErr(in *PlanInput) error {
	if !in.hasAnnounced() {
		return nil
	}
	for _, u := range in.Units {
		if u.ForceHost {
			return fmt.Errorf("offload: plan: unit %q is forced onto the host, but host placement does not combine with data-dependent (announced) units such as experts yet", u.Name)
		}
	}
	return nil
}

// hasAnnounced reports whether any unit is announced.
func (in *PlanInput) hasAnnounced() bool {
	for _, u := range in.Units {
		if u.Announced {
			return true
		}
	}
	return false
}

// makePoolPlan is MakePlan for an input with announced units:
//
//  1. If everything fits, everything is resident.
//  2. The units that are not announced (attention, dense layers) are
//     planned by MakePlan's rules as if alone, under the budget less a
//     reserve of pool slots for the announced ones: MaxAnnounced slots (so
//     that an MoE layer's routed experts can all be copied at once) sized
//     to the largest announced unit, or one slot when that reserve does not
//     leave room for the dense plan (or, with no dense units, does not fit).
//  3. What the dense plan leaves (reserve included) goes to the announced
//     units: the most used ones are made resident, in order of the copies
//     a pass they would cost streamed (RunShare, then Calls: the bytes
//     saved per pass, RunShare × Bytes, per byte kept), skipping units
//     never called, as long as the reserved slots (sized to the largest
//     unit still streamed) fit beside them.
//  4. The bytes left become pool slots, at least the reserve, at most one
//     per streamed announced unit.
//
// The prediction (PredictPlan) adds to the dense plan's simulated time the
// announced units' compute (Calls × ComputeSec) or their expected copies,
// whichever is longer (copies overlap the previous experts' compute), and
// bounds it below by the copy stream's total.
func makePoolPlan(in PlanInput) (Plan, error) {
	n := len(in.Units)
	var dense, ann []int
	var total, maxAnn int64
	for i, u := range in.Units {
		total += u.Bytes
		if u.Announced {
			ann = append(ann, i)
			maxAnn = max(maxAnn, u.Bytes)
		} else {
			dense = append(dense, i)
		}
	}
	if err := poolForceHostErr(&in); err != nil {
		return Plan{}, err
	}
	res := make([]bool, n)
	if in.FixedBytes+total <= in.Budget {
		for i := range res {
			res[i] = true
		}
		return poolPlanOf(in, res, Plan{}, 0, 0), nil
	}
	if f := leastBudget(in); f.bytes > in.Budget {
		return Plan{}, f.budgetErr(in.Budget)
	}
	reserve := min(max(in.MaxAnnounced, 1), len(ann))
	var dp Plan
	for {
		if len(dense) == 0 {
			if reserve > 1 && in.FixedBytes+int64(reserve)*maxAnn > in.Budget {
				reserve = 1 // as with dense units: one slot when the reserve does not fit
			}
			dp = Plan{PeakBytes: in.FixedBytes + int64(reserve)*maxAnn}
			break
		}
		sub := PlanInput{FixedBytes: in.FixedBytes + int64(reserve)*maxAnn, Budget: in.Budget, Slots: in.Slots,
			Curve: in.Curve, TransferScale: in.TransferScale, Tokens: in.Tokens}
		for _, i := range dense {
			u := in.Units[i]
			// Host placement is two-way here: the pool plan keeps no host
			// units (a mixture-of-experts model streams or keeps its layers).
			u.HostSecPerToken = 0
			sub.Units = append(sub.Units, u)
		}
		var err error
		if dp, err = MakePlan(sub); err == nil {
			break
		}
		if errors.Is(err, ErrBudget) && reserve > 1 {
			reserve = 1
			continue
		}
		return Plan{}, fmt.Errorf("%w (with %d pool slots of %d bytes reserved for the %d announced units)", err, reserve, maxAnn, len(ann))
	}
	if dp.PeakBytes > in.Budget {
		return Plan{}, fmt.Errorf("offload: plan: %w: budget %d bytes < %d bytes for the dense units and %d pool slots", ErrBudget, in.Budget, dp.PeakBytes, reserve)
	}
	for k, i := range dense {
		res[i] = dp.Resident[k]
	}
	room := in.Budget - (dp.PeakBytes - int64(reserve)*maxAnn) // for the announced units: resident and pool

	order := slices.Clone(ann)
	sort.SliceStable(order, func(a, b int) bool { return moreUsed(in.Units[order[a]], in.Units[order[b]]) })
	var resBytes int64
	fits := func() bool {
		s, slot := 0, int64(0)
		for _, i := range ann {
			if !res[i] {
				s++
				slot = max(slot, in.Units[i].Bytes)
			}
		}
		return resBytes+int64(min(reserve, s))*slot <= room
	}
	for _, i := range order {
		if in.Units[i].Calls <= 0 {
			continue
		}
		res[i] = true
		resBytes += in.Units[i].Bytes
		if !fits() {
			res[i] = false
			resBytes -= in.Units[i].Bytes
		}
	}
	s, slot := 0, int64(0)
	for _, i := range ann {
		if !res[i] {
			s++
			slot = max(slot, in.Units[i].Bytes)
		}
	}
	poolSlots := 0
	if s > 0 {
		poolSlots = int(min(int64(s), (room-resBytes)/max(slot, 1)))
		if poolSlots < 1 {
			return Plan{}, fmt.Errorf("offload: plan: %w: no room for a pool slot of %d bytes", ErrBudget, slot)
		}
	}
	return poolPlanOf(in, res, dp, poolSlots, slot), nil
}

// moreUsed orders announced units for residency and for the pool's
// expected contents: more copies a pass, then more calls.
func moreUsed(a, b PlanUnit) bool {
	if ca, cb := a.copies(), b.copies(); ca != cb {
		return ca > cb
	}
	return a.Calls > b.Calls
}

// poolPlanOf assembles the plan: res for every unit, the dense plan dp (its
// Resident, SlotOf and Prefetch over the dense units in order), the pool.
func poolPlanOf(in PlanInput, res []bool, dp Plan, poolSlots int, poolSlotBytes int64) Plan {
	n := len(in.Units)
	pl := Plan{Resident: res, SlotOf: make([]int, n), Slots: dp.Slots, SlotBytes: dp.SlotBytes, Tokens: in.Tokens,
		PoolSlots: poolSlots, PoolSlotBytes: poolSlotBytes}
	k := 0
	for i, u := range in.Units {
		pl.SlotOf[i] = -1
		if u.Announced {
			continue
		}
		if !res[i] {
			pl.SlotOf[i] = dp.SlotOf[k]
			pl.Prefetch = append(pl.Prefetch, i)
		}
		k++
	}
	pl.PeakBytes = planPeak(in, pl)
	pr := poolPredict(in, pl)
	pl.PredictedSec, pl.FloorSec, pl.ExpectedMissRate, pl.ExpectedPoolBytes = pr.sec, pr.floor, pr.miss, pr.bytes
	return pl
}

// planPeak is the device bytes of pl: fixed, resident units, ring and pool.
func planPeak(in PlanInput, pl Plan) int64 {
	b := in.FixedBytes + int64(pl.Slots)*pl.SlotBytes + int64(pl.PoolSlots)*pl.PoolSlotBytes
	for i, r := range pl.Resident {
		if r {
			b += in.Units[i].Bytes
		}
	}
	return b
}

// poolPrediction is what poolPredict computes.
type poolPrediction struct {
	sec, floor float64
	miss       float64 // expected share of streamed announced calls that copy
	bytes      float64 // expected bytes those copies move per pass
	ok         bool
}

// poolPredict predicts pl's forward time for an input with announced units.
//
// The dense units run as Simulate says (their ring with pl.Slots slots).
// The announced units add Σ Calls × ComputeSec of compute. A streamed one
// costs a copy in each pass it runs in (copies(): its later calls in the
// pass find it in its slot), except the units the pool keeps beyond one
// announcement's worth of slots: with EvictFrequency it keeps the most used
// streamed units, so the PoolSlots − min(MaxAnnounced, streamed) most used
// streamed units are expected to hit. The copies overlap the compute of
// the experts before them, so the announced part takes the longer of its
// compute and its copies, and the copy stream (dense and announced copies)
// bounds the pass from below. The miss rate is the copies over the
// streamed units' calls.
func poolPredict(in PlanInput, pl Plan) poolPrediction {
	scale := in.TransferScale
	if scale == 0 {
		scale = 1
	}
	var sub PlanInput
	var subRes []bool
	var denseComp, denseX float64
	for i, u := range in.Units {
		if u.Announced {
			continue
		}
		sub.Units = append(sub.Units, u)
		subRes = append(subRes, pl.Resident[i])
		denseComp += u.ComputeSec
		if !pl.Resident[i] {
			denseX += scale * in.Curve.Time(u.Bytes)
		}
	}
	denseSec := denseComp
	if denseX > 0 {
		sub.Budget, sub.Curve, sub.TransferScale = math.MaxInt64, in.Curve, in.TransferScale
		sec, ok := Simulate(sub, subRes, max(pl.Slots, 1))
		if !ok {
			return poolPrediction{}
		}
		denseSec = sec
	}
	var annComp float64
	for _, u := range in.Units {
		if u.Announced {
			annComp += u.Calls * u.ComputeSec
		}
	}
	var annX, bytes, calls, missCalls float64
	for i, c := range expectedCopies(in, pl) {
		u := in.Units[i]
		if !u.Announced || pl.Resident[i] {
			continue
		}
		calls += u.Calls
		missCalls += c
		annX += c * scale * in.Curve.Time(u.Bytes)
		bytes += c * float64(u.Bytes)
	}
	p := poolPrediction{ok: true, bytes: bytes}
	if calls > 0 {
		p.miss = missCalls / calls
	}
	p.sec = max(denseSec+max(annComp, annX), denseX+annX)
	p.floor = max(denseComp+annComp, denseX+annX)
	return p
}

// expectedCopies is each unit's expected copies into the pool a pass under
// pl (0 for units that are not announced, resident, or expected to stay
// in the pool; see poolPredict).
func expectedCopies(in PlanInput, pl Plan) []float64 {
	out := make([]float64, len(in.Units))
	var streamed []int
	for i, u := range in.Units {
		if u.Announced && !pl.Resident[i] {
			streamed = append(streamed, i)
		}
	}
	sort.SliceStable(streamed, func(a, b int) bool { return moreUsed(in.Units[streamed[a]], in.Units[streamed[b]]) })
	extra := pl.PoolSlots - min(max(in.MaxAnnounced, 1), len(streamed))
	for k, i := range streamed {
		if k >= extra { // else kept in the pool
			out[i] = min(in.Units[i].copies(), in.Units[i].Calls)
		}
	}
	return out
}

// PredictPlan is the planner's predicted forward time of pl for in (ok
// false when pl does not match in or exceeds the budget): Simulate for an
// input without announced units (on hostInput's transformed input for a
// three-way plan), else the pool model (see makePoolPlan).
func PredictPlan(in PlanInput, pl Plan) (float64, bool) {
	if in.validate() != nil || len(pl.Resident) != len(in.Units) {
		return 0, false
	}
	if !in.hasAnnounced() {
		if pl.HostUnits() > 0 {
			return predictHostPlan(in, pl)
		}
		return Simulate(in, pl.Resident, pl.Slots)
	}
	if len(pl.SlotOf) != len(in.Units) || planPeak(in, pl) > in.Budget {
		return 0, false
	}
	for i, u := range in.Units {
		if u.Announced && !pl.Resident[i] && (pl.PoolSlots < 1 || u.Bytes > pl.PoolSlotBytes) {
			return 0, false
		}
	}
	p := poolPredict(in, pl)
	return p.sec, p.ok
}
