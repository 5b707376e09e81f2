package offload

import (
	"fmt"
	"slices"
	"strings"
)

// planFloor is the least budget under which MakePlan finds a plan for an
// input (its Budget aside) and what that budget is made of. MakePlan's own
// budget errors and the engine's pre-flight check (devicefit.go) both come
// from leastBudget, so the check refuses exactly the budgets the plan
// after profiling would.
type planFloor struct {
	bytes int64
	fixed int64 // FixedBytes
	// resident: every unit stays on the device (the whole model is the
	// least: streaming would need more).
	resident bool
	units    int64 // with resident: the units' bytes
	// The least streaming plan: slots transfer blocks of slotBytes, sized
	// to unit slotUnit, and forced bytes of larger units kept resident.
	slots     int
	slotBytes int64
	slotUnit  string
	forced    int64
	// poolBytes is one expert-pool slot for the largest announced unit
	// (0 when no unit is announced).
	poolBytes int64
}

// leastBudget is the smallest Budget with which MakePlan(in) finds a plan:
// the whole model resident, or, when less, the least streaming plan. A
// streaming plan with s = max(in.Slots, 1) transfer blocks sized to a unit
// of M bytes keeps every larger unit resident and needs
// FixedBytes + (larger units) + min(s, units of 1..M bytes) × M; the least
// over M is the floor (with s = 1, FixedBytes + the largest unit). Units
// forced onto the host (ForceHost) take no device bytes. With announced
// units (experts) one pool slot for the largest of them comes on top and
// the floor is that of the units that are not announced. Only the bytes
// count: a curve, times and MaxAnnounced do not change it.
func leastBudget(in PlanInput) planFloor {
	var all int64
	for _, u := range in.Units {
		if !u.ForceHost {
			all += u.Bytes
		}
	}
	var f planFloor
	if in.hasAnnounced() {
		var dense []PlanUnit
		var maxAnn int64
		for _, u := range in.Units {
			if u.Announced {
				maxAnn = max(maxAnn, u.Bytes)
			} else {
				dense = append(dense, u)
			}
		}
		f = streamFloor(in.FixedBytes+maxAnn, dense, in.Slots)
		f.fixed, f.poolBytes = in.FixedBytes, maxAnn
	} else {
		f = streamFloor(in.FixedBytes, in.Units, in.Slots)
	}
	if in.FixedBytes+all <= f.bytes {
		return planFloor{bytes: in.FixedBytes + all, fixed: in.FixedBytes, resident: true, units: all}
	}
	return f
}

// streamFloor is the least streaming plan of units (see leastBudget) with
// fixed bytes always resident; with no unit to stream, fixed.
func streamFloor(fixed int64, units []PlanUnit, slots int) planFloor {
	s := int64(max(slots, 1))
	type sized struct {
		bytes int64
		name  string
	}
	var us []sized
	for _, u := range units {
		if u.Bytes > 0 && !u.ForceHost {
			us = append(us, sized{u.slotNeed(), u.Name})
		}
	}
	best := planFloor{bytes: fixed, fixed: fixed}
	if len(us) == 0 {
		return best
	}
	// Ascending by size, the first unit of each size first (its name is
	// the one an error gives).
	slices.SortStableFunc(us, func(a, b sized) int {
		switch {
		case a.bytes < b.bytes:
			return -1
		case a.bytes > b.bytes:
			return 1
		}
		return 0
	})
	var above int64 // bytes of the units larger than us[i]
	for _, u := range us {
		above += u.bytes
	}
	found := false
	for i := 0; i < len(us); {
		j := i
		for j < len(us) && us[j].bytes == us[i].bytes {
			above -= us[j].bytes
			j++
		}
		size := us[i].bytes
		n := min(s, int64(j)) // units of at most size: j
		if need := fixed + above + n*size; !found || need < best.bytes {
			best = planFloor{bytes: need, fixed: fixed, slots: int(n), slotBytes: size, slotUnit: us[i].name, forced: above}
			found = true
		}
		i = j
	}
	return best
}

// describe says what the floor is made of, with bytes formatted by fb.
func (f planFloor) describe(fb func(int64) string) string {
	if f.resident {
		return fmt.Sprintf("the whole model resident: %s of non-unit weights + %s of units (less than any plan that streams)", fb(f.fixed), fb(f.units))
	}
	var parts []string
	if f.slots > 0 {
		blocks := "one transfer block"
		if f.slots > 1 {
			blocks = fmt.Sprintf("%d transfer blocks", f.slots)
		}
		parts = append(parts, fmt.Sprintf("%s of %s (sized to the unit %q)", blocks, fb(f.slotBytes), f.slotUnit))
	}
	if f.forced > 0 {
		parts = append(parts, fmt.Sprintf("%s of larger units kept resident", fb(f.forced)))
	}
	if f.poolBytes > 0 {
		parts = append(parts, fmt.Sprintf("one pool slot of %s for the largest announced unit (an expert)", fb(f.poolBytes)))
	}
	parts = append(parts, fmt.Sprintf("%s of non-unit weights", fb(f.fixed)))
	return strings.Join(parts, " + ")
}

// planBytes formats a byte count as the planner's errors do.
func planBytes(n int64) string { return fmt.Sprintf("%d bytes", n) }

// budgetErr is MakePlan's error for a budget below the floor f.
func (f planFloor) budgetErr(budget int64) error {
	return fmt.Errorf("offload: plan: %w: budget %d bytes < %d bytes needed for %s", ErrBudget, budget, f.bytes, f.describe(planBytes))
}
