package offload

// swapHost improves a three-way plan whose units differ in host time
// (host_blocks.go: identical layers whose host blocks read at different
// rates). The greedy search of makeHostPlan cannot tell such units apart
// while the forward is copy-bound (moving any streamed unit to the host
// then saves the same copy), and the two-way search chooses the resident
// set without looking at host times, so units on fast blocks can end up
// streamed or resident while slower ones compute on the host.
//
// Each round tries every swap of a host unit h (not forced) with a unit r
// that is not on the host, can be, and has a shorter host time: r computed
// on the host, h in r's place (resident when r was: res, in which host
// units count as resident, keeps r's flag for h). It scores each with
// Simulate on the current resident set and slot count and makes the swap
// that shortens the predicted forward most; when none shortens it, the one
// that saves the most host time without lengthening it (within 1e-9
// relative): a host time measured later then has the most room. It stops
// when no swap qualifies; every swap lowers the host units' total time, so
// it ends, and it is capped at 2n rounds. Units with equal host times are
// never swapped, so plans of uniform units are unchanged. It returns the
// predicted seconds after the swaps and whether any was made.
func swapHost(in PlanInput, host, res []bool, slots int, sec float64) (float64, bool) {
	n := len(in.Units)
	const eps = 1e-9
	moved := false
	for range 2 * n {
		bh, br, bestSec, bestGain := -1, -1, sec, 0.0
		for h := range n {
			if !host[h] || in.Units[h].ForceHost {
				continue
			}
			for r := range n {
				if host[r] || in.Units[r].HostSecPerToken <= 0 {
					continue
				}
				gain := in.hostSec(h) - in.hostSec(r)
				if gain <= 0 {
					continue
				}
				host[h], host[r] = false, true
				res[h], res[r] = res[r], true
				p := newPlanProblem(hostInput(in, host))
				e := p.evaluate(res, max(slots, 1))
				res[r], res[h] = res[h], true
				host[h], host[r] = true, false
				if !e.ok {
					continue
				}
				if e.sec < bestSec*(1-eps) || e.sec <= bestSec*(1+eps) && gain > bestGain {
					bh, br, bestSec, bestGain = h, r, e.sec, gain
				}
			}
		}
		if bh < 0 {
			break
		}
		host[bh], host[br] = false, true
		res[bh], res[br] = res[br], true
		sec, moved = bestSec, true
	}
	return sec, moved
}
