package offload

import (
	"fmt"
	"slices"
	"strings"
)

// Per-pass account: what the engine did with each forward of the root, so
// that a caller timing its own steps (run-model's FT_TOKEN_TRACE, bench's)
// can tell the steady passes of a plan from the ones that discover,
// profile, measure or change placements, and see the plan each ran under.

// PassInfo describes one finished forward of an offloaded model.
type PassInfo struct {
	// Seq numbers the passes the engine finished, from 1 (0: none yet).
	Seq int
	// Phase is the phase the pass ran in.
	Phase Phase
	// Tokens is the pass's tokens per forward (0 without a TokenCounter).
	Tokens int
	// Measured is what the pass measured besides computing (0 for a
	// steady INFERENCE pass); Measuring names it. DISCOVERY and PROFILING
	// passes are measuring by their phase and set nothing.
	Measured Measured
	// Bucket is the tokens-per-forward bucket measured when Measured has
	// MeasuredBucket.
	Bucket int
	// Suspended is true when the pass ran with profiling suspended.
	Suspended bool
	// Resident, Streamed and Host count the units of the plan in force
	// when the pass began (INFERENCE only), PlanTokens its tokens per
	// forward (0: unknown).
	Resident, Streamed, Host, PlanTokens int
	// Packed counts the streamed units whose copies travel exp4-packed
	// (Config.StreamExp4; the others travel as they are).
	Packed int
	// PlanChanged is true when the pass's end put another placement in
	// force (a replan applied, a switch of tokens bucket, the end of
	// PROFILING), so the next pass starts from moved units and idle slots.
	PlanChanged bool
	// AfterChange is true when the previous pass's end changed the
	// placement: this pass started from moved units and idle slots.
	AfterChange bool
}

// Measured is a set of things a pass measured besides computing; the
// engine records it as bits so that a measuring pass allocates nothing.
type Measured uint8

// The things a pass can measure, in the order Measuring names them.
const (
	// MeasuredHostWarm: a warm-up pass of the host units' timing.
	MeasuredHostWarm Measured = 1 << iota
	// MeasuredHost: host units timed for a replan.
	MeasuredHost
	// MeasuredCopies: the copies beside the host units timed too.
	MeasuredCopies
	// MeasuredBucket: a tokens-per-forward bucket (PassInfo.Bucket).
	MeasuredBucket
	// MeasuredReplan: a strategy replan in progress.
	MeasuredReplan
	// MeasuredTiming: Config.OffloadTiming on.
	MeasuredTiming
)

// Measuring names what the pass measured, in the order of the Measured
// bits: "host units warm-up", "host units", "copies", "bucket N",
// "strategy replan", "timing"; nil when nothing.
func (p PassInfo) Measuring() []string {
	if p.Measured == 0 {
		return nil
	}
	var out []string
	names := [...]string{"host units warm-up", "host units", "copies", "", "strategy replan", "timing"}
	for i, name := range names {
		if p.Measured&(1<<i) == 0 {
			continue
		}
		if Measured(1<<i) == MeasuredBucket {
			name = fmt.Sprintf("bucket %d", p.Bucket)
		}
		out = append(out, name)
	}
	return out
}

// Steady reports whether the pass ran the plan in force with nothing
// measured and no placement changed before or after it: what a decode
// rate is made of (bench skips the others).
func (p PassInfo) Steady() bool {
	return p.Seq > 0 && p.Phase == PhaseInference && p.Measured == 0 && !p.Suspended && !p.PlanChanged && !p.AfterChange
}

// OnOwnPlan reports whether the plan in force during the pass was made for
// the pass's own tokens-per-forward bucket (TokenCounter): their counts
// differ by less than the factor that opens another bucket. Passes of a
// new size run the previous plan until theirs is measured, made and
// switched to; without counts (plans not keyed) it reports true.
func (p PassInfo) OnOwnPlan() bool {
	if p.Tokens <= 0 || p.PlanTokens <= 0 {
		return true
	}
	return p.Tokens < p.PlanTokens*tokenFactor && p.PlanTokens < p.Tokens*tokenFactor
}

// String is a one-line account, e.g. "pass 9 INFERENCE T=1, plan 15/7/10
// (res/str/host) for T=1, steady".
func (p PassInfo) String() string {
	if p.Seq == 0 {
		return "no pass yet"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "pass %d %v T=%d", p.Seq, p.Phase, p.Tokens)
	if p.Phase == PhaseInference {
		fmt.Fprintf(&b, ", plan %d/%d/%d (res/str/host) for T=%d", p.Resident, p.Streamed, p.Host, p.PlanTokens)
		if p.Packed > 0 {
			fmt.Fprintf(&b, ", %d streamed packed", p.Packed)
		}
	}
	switch {
	case p.Steady():
		b.WriteString(", steady")
	case p.Phase != PhaseInference:
		b.WriteString(", profiling")
	}
	if p.Measured != 0 {
		fmt.Fprintf(&b, ", measuring %s", strings.Join(p.Measuring(), "+"))
	}
	if p.Suspended {
		b.WriteString(", profiling suspended")
	}
	if p.AfterChange {
		b.WriteString(", first under a new placement")
	}
	if p.PlanChanged {
		b.WriteString(", placement changed after it")
	}
	return b.String()
}

// passBegin records the pass's start (beginPass, after the bucket and host
// measurement decisions: a switch of tokens bucket puts its plan in force
// at the pass's entry, before this).
func (e *engine) passBegin() {
	p := PassInfo{Phase: e.phase, Tokens: e.tok.passT, Suspended: e.m.suspended > 0,
		AfterChange: e.lastPass.PlanChanged || (e.passSeq > 0 && e.placementMoved())}
	if e.phase == PhaseInference {
		for u := range e.plan.Resident {
			switch {
			case e.plan.IsHost(u):
				p.Host++
			case e.plan.Resident[u]:
				p.Resident++
			default:
				p.Streamed++
			}
		}
		p.PlanTokens = e.plan.Tokens
		if e.ring != nil {
			for _, u := range e.ring.order {
				if u.packed != nil {
					p.Packed++
				}
			}
		}
		if e.hm.on {
			if e.hm.passes < replanWarm {
				p.Measured |= MeasuredHostWarm
			} else {
				p.Measured |= MeasuredHost
			}
			if e.ring != nil && e.ring.logCopies {
				p.Measured |= MeasuredCopies
			}
		}
		if e.tok.measure != nil {
			p.Measured |= MeasuredBucket
			p.Bucket = e.tok.measure.ref
		}
		if e.replan.state == ReplanInProgress {
			p.Measured |= MeasuredReplan
		}
		if e.cfg.OffloadTiming != TimingOff {
			p.Measured |= MeasuredTiming
		}
	}
	e.pass = p
	e.notePlacement()
}

// placementMoved reports whether the plan in force places units otherwise
// than when notePlacement last ran.
func (e *engine) placementMoved() bool {
	return !slices.Equal(e.passRes, e.plan.Resident) || !slices.Equal(e.passHost, e.plan.Host) || e.passSlots != e.plan.Slots
}

// notePlacement keeps the plan in force's placement (no allocation a pass
// once the slices have grown).
func (e *engine) notePlacement() {
	e.passRes = append(e.passRes[:0], e.plan.Resident...)
	e.passHost = append(e.passHost[:0], e.plan.Host...)
	e.passSlots = e.plan.Slots
}

// passEnd completes the pass's record once it ended without error.
func (e *engine) passEnd() {
	e.passSeq++
	p := e.pass
	p.Seq = e.passSeq
	if e.phase == PhaseInference {
		p.PlanChanged = p.Phase != PhaseInference || e.placementMoved()
	}
	e.notePlacement()
	e.lastPass = p
	if e.m != nil {
		e.m.setLastPass(p)
	}
}

// setLastPass publishes p to LastPass.
func (m *Manager) setLastPass(p PassInfo) {
	m.lastMu.Lock()
	m.last = p
	m.lastMu.Unlock()
}

// LastPass reports the last forward the manager finished without error
// (Seq 0 before any, and after Release). It takes its own lock, not the
// one the engine holds for a whole forward: called from another goroutine
// during a forward it returns the previous pass at once, and a hook inside
// the forward may call it.
func (m *Manager) LastPass() PassInfo {
	m.lastMu.Lock()
	defer m.lastMu.Unlock()
	return m.last
}
