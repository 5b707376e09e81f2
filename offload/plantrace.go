package offload

import (
	"fmt"
	"time"
)

// tracePlan reports a plan put in force (or kept) to the configured Trace
// (the CLI prints it with FT_TRACE=1): why, its placement counts, its
// tokens per forward, what it predicts and, when host times were measured
// for its bucket, their median. d is the time the step took.
func (e *engine) tracePlan(why string, p Plan, d time.Duration) {
	e.tracePlanIn(why, p, e.planIn, d)
}

// tracePlanIn is tracePlan for plan p made from input in. With host units
// it adds the host's DRAM read figure and the host unit's predicted run
// beside the copies (the shared-read model, planner_share.go), median over
// the plan's host units, and its time alone.
func (e *engine) tracePlanIn(why string, p Plan, in PlanInput, d time.Duration) {
	if e.cfg.Trace == nil {
		return
	}
	res, str := 0, 0
	for i, r := range p.Resident {
		switch {
		case p.IsHost(i):
		case r:
			res++
		default:
			str++
		}
	}
	step := fmt.Sprintf("plan %s: %d resident / %d streamed / %d host, %d tokens, predicted %.2f ms", why, res, str, p.HostUnits(), p.Tokens, p.PredictedSec*1e3)
	if meds := e.hm.inHybrid[p.Tokens]; len(meds) > 0 {
		var ms, alone []float64
		for u, s := range meds {
			ms = append(ms, s*1e3*float64(max(p.Tokens, 1)))
			alone = append(alone, e.hm.byT[p.Tokens][u]*1e3*float64(max(p.Tokens, 1)))
		}
		step += fmt.Sprintf(", host unit measured %.2f ms in the forward, %.2f ms alone by the model (medians of %d units)", median(ms), median(alone), len(ms))
	} else if e.hostBW > 0 {
		step += fmt.Sprintf(", host estimate at %.1f GB/s", e.hostBW/1e9)
		if t := min(p.Tokens, hostProdMaxTokens); e.hostProd[t] > 0 {
			step += fmt.Sprintf(" (products of %d tokens timed at %.1f GB/s a token)", t, float64(t)/e.hostProd[t]/1e9)
		}
	}
	if p.HostUnits() > 0 {
		if in.HostReadBytesPerSec > 0 {
			step += fmt.Sprintf(", host DRAM read %.1f GB/s (%s)", in.HostReadBytesPerSec/1e9, e.hostDRAMFrom)
		} else {
			step += ", host DRAM read not modelled"
		}
		if runs, _, ok := hostRunTimes(in, p); ok {
			var pred, alone []float64
			for u, r := range runs {
				if p.IsHost(u) {
					pred = append(pred, r*1e3)
					alone = append(alone, in.hostSec(u)*1e3)
				}
			}
			step += fmt.Sprintf(", host unit predicted %.2f ms beside the copies (%.2f alone)", median(pred), median(alone))
		}
		step += e.hostRatesTrace(p)
	}
	e.cfg.Trace(step, d)
}
