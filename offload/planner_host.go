package offload

import (
	"math"
	"slices"
	"sort"
)

// Three-way plans: a unit is resident on the device, streamed to it through
// the transfer slots, or computed on the host CPU over its pinned host block
// (its activations and KV cache on the host too).
//
// The model of the forward extends Simulate's two-stream schedule with a
// third resource, the host, on the critical path: a host-computed unit is a
// step of the compute chain that lasts HostSecPerToken × max(Tokens, 1),
// takes no device memory and no slot, and lets the copy stream run ahead
// meanwhile (the copies of later streamed units go on while the host
// computes, as far as free slots allow). A stretch of consecutive
// host-computed units adds two hops (HopSec each): the hidden state goes to
// the host before its first unit and back after its last. The pass boundary
// ends a stretch (the model's head runs on the device).
//
// So a host unit is scored as a resident unit of 0 bytes whose compute time
// is its host time plus the hops it pays: the search reuses the two-way
// planner on that transformed input. With the host's DRAM read bandwidth
// known (PlanInput.HostReadBytesPerSec), the transformed input also carries
// the shared-read model (planner_share.go): a host unit then runs slower
// while the copy engine reads the same memory, and the simulation follows
// the engine's schedule copy by copy.
//
// Host compute grows with the tokens a forward carries and copies do not:
// at batch-1 decode a fast host takes a share of the streamed units, at a
// prefill or a large batch its time dwarfs the copies and every unit streams.

// hasHost reports whether any unit may be computed on the host.
func (in *PlanInput) hasHost() bool {
	for _, u := range in.Units {
		if u.HostSecPerToken > 0 || u.ForceHost {
			return true
		}
	}
	return false
}

// hostSec is unit u's host compute time at the input's tokens per forward.
func (in *PlanInput) hostSec(u int) float64 {
	return in.Units[u].HostSecPerToken * float64(max(in.Tokens, 1))
}

// IsHost reports whether the plan computes unit u on the host.
func (pl Plan) IsHost(u int) bool { return u >= 0 && u < len(pl.Host) && pl.Host[u] }

// HostUnits is the number of units the plan computes on the host.
func (pl Plan) HostUnits() int {
	n := 0
	for _, h := range pl.Host {
		if h {
			n++
		}
	}
	return n
}

// hostInput is in with the units in host turned into 0-byte resident-like
// units whose compute is their host time plus the hops they pay, and every
// host field cleared (so the two-way search runs on it).
func hostInput(in PlanInput, host []bool) PlanInput {
	out := in
	out.share = newHostShare(in, host)
	out.HopSec = 0
	out.Units = slices.Clone(in.Units)
	n := len(in.Units)
	for u := range out.Units {
		out.Units[u].HostSecPerToken, out.Units[u].ForceHost = 0, false
		if !host[u] {
			continue
		}
		sec := in.hostSec(u)
		if u == 0 || !host[u-1] {
			sec += in.HopSec
		}
		if u == n-1 || !host[u+1] {
			sec += in.HopSec
		}
		out.Units[u].Bytes, out.Units[u].ComputeSec = 0, sec
	}
	return out
}

// hostPlan turns a plan of hostInput(in, host) into the three-way plan.
func hostPlan(pl Plan, host []bool) Plan {
	pl.Resident = slices.Clone(pl.Resident)
	pl.Host = slices.Clone(host)
	for u, h := range host {
		if h {
			pl.Resident[u], pl.SlotOf[u] = false, -1
		}
	}
	return pl
}

// makeHostPlan is MakePlan for inputs where units may be computed on the
// host. It starts from the forced host units (ForceHost) and the two-way
// plan of the rest, then moves units to the host greedily: each round tries
// every unit that is neither resident nor on the host yet (and has a host
// time), scores the move with Simulate on the current resident set and slot
// count, and makes the move that shortens the predicted forward most; it
// stops when no move helps; then units faster on the host than host units
// swap places with them (swapHost). The final host set
// is planned once more by the
// two-way search (a smaller streamed set may let other units be resident),
// and the faster of the two plans is kept; under the shared-read model
// (HostReadBytesPerSec > 0) the copy-nothing plan (noCopyPlan) is a third
// candidate. 32 layers take a few thousand
// simulated passes: milliseconds.
func makeHostPlan(in PlanInput) (Plan, error) {
	n := len(in.Units)
	host := make([]bool, n)
	for u, pu := range in.Units {
		host[u] = pu.ForceHost
	}
	cur, err := makeTwoWayPlan(hostInput(in, host))
	if err != nil {
		return Plan{}, err
	}
	res := cur.Resident // host units are resident (0 bytes) in the transformed plan
	slots := cur.Slots
	sec := cur.PredictedSec
	for {
		best, bestSec := -1, sec
		for u := range n {
			if host[u] || res[u] || in.Units[u].HostSecPerToken <= 0 {
				continue
			}
			host[u] = true
			try := slices.Clone(res)
			try[u] = true
			p := newPlanProblem(hostInput(in, host))
			s := max(slots, 1)
			if e := p.evaluate(try, s); e.ok && e.sec < bestSec*(1-1e-9) {
				best, bestSec = u, e.sec
			}
			host[u] = false
		}
		if best < 0 {
			break
		}
		host[best], res[best], sec = true, true, bestSec
		p := newPlanProblem(hostInput(in, host))
		cur = p.plan(res, max(slots, 1))
		slots = cur.Slots
	}
	// Units of different host times (rated host blocks): a unit off the
	// host that computes faster there than a host unit takes its place.
	if s, moved := swapHost(in, host, res, slots, sec); moved {
		sec = s
		cur = newPlanProblem(hostInput(in, host)).plan(res, max(slots, 1))
		slots = cur.Slots
	}
	final, err := makeTwoWayPlan(hostInput(in, host))
	if err == nil && final.PredictedSec <= cur.PredictedSec {
		cur = final
	}
	// The copy-nothing extreme is only weighed under the shared-read model
	// (where copies slow the host units down): with the model off the
	// greedy choice stands, as it did before the model existed.
	if in.HostReadBytesPerSec > 0 {
		if nc, nh, ok := noCopyPlan(in); ok && nc.PredictedSec < cur.PredictedSec*(1-1e-9) {
			cur, host = nc, nh
		}
	}
	pl := hostPlan(cur, host)
	if pl.HostUnits() == 0 {
		pl.Host = nil
	}
	return pl, nil
}

// noCopyPlan is the plan that copies nothing: the units that gain most from
// the device (host time minus device compute) resident while they fit the
// budget, every other unit on the host (ok is false when one of those cannot
// be computed there, or a forced host unit would have to be resident). With
// copies and host reads sharing the host's memory, this extreme can beat
// every plan the greedy moves reach, which add one host unit at a time
// beside copies (planner_share.go).
func noCopyPlan(in PlanInput) (Plan, []bool, bool) {
	n := len(in.Units)
	order := make([]int, 0, n)
	for u := range n {
		order = append(order, u)
	}
	gain := func(u int) float64 {
		if in.Units[u].ForceHost {
			return math.Inf(-1)
		}
		if in.Units[u].HostSecPerToken <= 0 {
			return math.Inf(1)
		}
		return in.hostSec(u) - in.Units[u].ComputeSec
	}
	sort.SliceStable(order, func(a, b int) bool { return gain(order[a]) > gain(order[b]) })
	host := make([]bool, n)
	room := in.Budget - in.FixedBytes
	for _, u := range order {
		pu := in.Units[u]
		if !pu.ForceHost && pu.Bytes <= room {
			room -= pu.Bytes
			continue
		}
		if pu.HostSecPerToken <= 0 && !pu.ForceHost {
			return Plan{}, nil, false
		}
		host[u] = true
	}
	all := make([]bool, n)
	for u := range all {
		all[u] = true
	}
	tin := hostInput(in, host)
	p := newPlanProblem(tin)
	if !p.evaluate(all, 0).ok {
		return Plan{}, nil, false
	}
	return p.plan(all, 0), host, true
}

// predictHostPlan is PredictPlan for a three-way plan: Simulate on the
// transformed input, where host units are 0-byte resident steps lasting
// their host time plus the hops they pay.
func predictHostPlan(in PlanInput, pl Plan) (float64, bool) {
	if len(pl.Host) != len(in.Units) {
		return 0, false
	}
	res := slices.Clone(pl.Resident)
	for u, h := range pl.Host {
		if h && res[u] {
			return 0, false
		}
		res[u] = res[u] || h
	}
	return Simulate(hostInput(in, pl.Host), res, pl.Slots)
}
