package offload

import (
	"fmt"
	"slices"
	"time"
)

// tracePlan reports a plan put in force (or kept) to the configured Trace
// (the CLI prints it with FT_TRACE=1): why, its placement counts, its
// tokens per forward, what it predicts and, when host times were measured
// for its bucket, their median. d is the time the step took.
func (e *engine) tracePlan(why string, p Plan, d time.Duration) {
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
	if meds := e.hm.byT[p.Tokens]; len(meds) > 0 {
		var ms []float64
		for _, s := range meds {
			ms = append(ms, s*1e3*float64(max(p.Tokens, 1)))
		}
		slices.Sort(ms)
		step += fmt.Sprintf(", host unit measured %.2f ms (median of %d units)", median(ms), len(ms))
	} else if e.hostBW > 0 {
		step += fmt.Sprintf(", host estimate at %.1f GB/s", e.hostBW/1e9)
	}
	e.cfg.Trace(step, d)
}
