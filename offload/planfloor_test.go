package offload

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestLeastBudgetIsPlannerFloor: leastBudget is exactly the planner's
// floor on random inputs (two-way, with units forced onto the host, with
// announced units, with requested slot counts): MakePlan finds a plan with
// that budget and refuses one byte less with ErrBudget, naming the floor.
func TestLeastBudgetIsPlannerFloor(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for i := range 400 {
		in := planRandomInput(r, 12)
		kind := "two-way"
		switch r.IntN(3) {
		case 1:
			kind = "host"
			for u := range in.Units {
				if r.IntN(3) == 0 {
					in.Units[u].ForceHost, in.Units[u].HostSecPerToken = true, planMs
				} else if r.IntN(2) == 0 {
					in.Units[u].HostSecPerToken = 5 * planMs
				}
			}
		case 2:
			kind = "announced"
			for u := range in.Units {
				if u > 0 && r.IntN(2) == 0 { // unit 0 stays dense half the time
					in.Units[u].Announced, in.Units[u].Calls, in.Units[u].RunShare = true, r.Float64()*2, r.Float64()
				}
			}
			in.MaxAnnounced = r.IntN(4)
		}
		f := leastBudget(in)
		in.Budget = f.bytes
		pl, err := MakePlan(in)
		if err != nil {
			t.Fatalf("case %d (%s): a budget at the floor %d (%s): %v\n%+v", i, kind, f.bytes, f.describe(planBytes), err, in)
		}
		if pl.PeakBytes > in.Budget {
			t.Fatalf("case %d (%s): peak %d over the budget %d", i, kind, pl.PeakBytes, in.Budget)
		}
		if f.bytes == 0 {
			continue
		}
		in.Budget = f.bytes - 1
		_, err = MakePlan(in)
		if !errors.Is(err, ErrBudget) || !strings.Contains(err.Error(), fmt.Sprintf("%d bytes needed", f.bytes)) {
			t.Fatalf("case %d (%s): a budget one byte below the floor %d: %v; want ErrBudget naming it\n%+v", i, kind, f.bytes, err, in)
		}
	}
}

// TestLeastBudgetParts: the floor counts the largest unit (not the
// smallest) in one block, every requested block, larger units kept
// resident, the whole model when that is less, and an expert-pool slot.
func TestLeastBudgetParts(t *testing.T) {
	u := func(name string, b int64) PlanUnit { return PlanUnit{Name: name, Bytes: b} }
	x := func(name string, b int64) PlanUnit { return PlanUnit{Name: name, Bytes: b, Announced: true, Calls: 1} }
	for _, c := range []struct {
		name string
		in   PlanInput
		want int64
		says string
	}{
		{"one block of the largest", PlanInput{Units: []PlanUnit{u("a", 10), u("b", 30), u("c", 20)}, FixedBytes: 5}, 35,
			`one transfer block of 30 bytes (sized to the unit "b") + 5 bytes of non-unit weights`},
		{"two blocks", PlanInput{Units: []PlanUnit{u("a", 10), u("b", 50), u("c", 20), u("d", 20)}, FixedBytes: 5, Slots: 2}, 95,
			`2 transfer blocks of 20 bytes (sized to the unit "c") + 50 bytes of larger units kept resident`},
		{"the whole model", PlanInput{Units: []PlanUnit{u("a", 10), u("b", 1)}, FixedBytes: 5, Slots: 2}, 16,
			"the whole model resident: 5 bytes of non-unit weights + 11 bytes of units"},
		{"a forced host unit takes nothing", PlanInput{Units: []PlanUnit{u("a", 10), {Name: "h", Bytes: 50, ForceHost: true, HostSecPerToken: 1}, u("b", 20)}, FixedBytes: 5}, 25,
			`sized to the unit "b"`},
		{"a pool slot", PlanInput{Units: []PlanUnit{u("attn", 10), x("e0", 40), x("e1", 30), u("attn2", 12)}, FixedBytes: 5, MaxAnnounced: 2}, 57,
			`one transfer block of 12 bytes (sized to the unit "attn2") + one pool slot of 40 bytes`},
		{"experts alone", PlanInput{Units: []PlanUnit{x("e0", 40), x("e1", 30)}, FixedBytes: 5, MaxAnnounced: 2}, 45,
			"one pool slot of 40 bytes"},
	} {
		f := leastBudget(c.in)
		if f.bytes != c.want || !strings.Contains(f.describe(planBytes), c.says) {
			t.Errorf("%s: %d bytes, %q; want %d bytes saying %q", c.name, f.bytes, f.describe(planBytes), c.want, c.says)
		}
	}
}
