package main

import (
	"fmt"

	"github.com/flextensor-go/flextensor/offload"
)

// noTimingNote says why --offload-timing has no table when the last forward
// the manager finished was a profiling one: timing measures inference passes only, and a short run
// (run-model --max-new-tokens 2 runs two forwards) may end before the
// discovery and profiling passes are done. It is "" otherwise.
func noTimingNote(m *offload.Manager) string {
	if m == nil {
		return ""
	}
	last := m.LastPass() // the last forward finished: a profiling one?
	if last.Seq == 0 {
		return "offload timing: no measured passes: no forward ran\n"
	}
	switch last.Phase {
	case offload.PhaseDiscovery, offload.PhaseProfiling:
	default:
		return ""
	}
	n := last.Seq
	cfg := m.Config()
	profiling := cfg.DiscoveryIters + cfg.ProfilingIters
	note := fmt.Sprintf("offload timing: no measured passes: the %d passes so far were profiling passes; timing starts after profiling", n)
	if n == 1 {
		note = "offload timing: no measured passes: the one pass so far was a profiling pass; timing starts after profiling"
	}
	if profiling > 0 {
		// run-model runs a forward per generated token.
		note += fmt.Sprintf(" (%d passes: %d discovery, %d profiling), so generate more than %d tokens (--max-new-tokens)",
			profiling, cfg.DiscoveryIters, cfg.ProfilingIters, profiling)
	}
	return note + "\n"
}
