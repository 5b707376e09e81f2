package offload

import (
	"fmt"
	"slices"
	"sort"
)

// TokenCounter is implemented by a root module that knows how many tokens
// the forward it is entering carries (decoder.Model: T for Forward, the
// whole batch for ForwardBatch). The engine reads it at the root's entry.
//
// A unit's compute grows with the tokens per forward, so the plan that
// hides transfers best at one decode token differs from the one for a
// batch of 256: with a TokenCounter the engine keys its plans by tokens per
// forward. The profiling passes give the first plan's token count (their
// median); in INFERENCE, a pass whose count differs from the plan's by a
// factor of tokenFactor or more belongs to another bucket. The first
// passes of a bucket without a plan are measured (one warm-up, then
// Config.ProfilingIters passes) and a plan is made for it from those
// compute times; once tokenSwitchPasses passes in a row fall in a bucket
// with a plan, the engine switches to it (moving units between resident
// and streamed only when the placements differ). So each bucket is
// measured once, and an odd pass of another size (a prefill between decode
// steps) changes nothing. Passes run while profiling is suspended
// (SuspendProfiling: warm-ups of other sizes) neither count nor measure.
// Without a TokenCounter, or when the first plan's count is unknown (a
// plan adopted from a profile), plans are not keyed.
type TokenCounter interface {
	PassTokens() int
}

// tokenFactor is the ratio of tokens per forward at which a pass belongs
// to another plan bucket.
const tokenFactor = 4

// tokenSwitchPasses is how many passes in a row a bucket must see before
// the engine switches to its plan.
const tokenSwitchPasses = 3

// TokenPlanStatus is a snapshot of the engine's plans per tokens per
// forward.
type TokenPlanStatus struct {
	// PlanTokens is the tokens per forward of the plan in force (0:
	// unknown, plans not keyed).
	PlanTokens int
	// Buckets are the token counts that have a plan, ascending.
	Buckets []int
	// FreeBuckets are the token counts of host-free buckets (passes that
	// cannot compute host units: hostfree.go) that have a plan, ascending.
	FreeBuckets []int
	// HostFree reports whether the plan in force is a host-free bucket's.
	HostFree bool
	// Measured counts buckets measured in INFERENCE (each once); Switches
	// counts changes of the plan in force between buckets.
	Measured, Switches int
}

// tokenBucket is one tokens-per-forward bucket: the passes measured for it
// and, once made, its plan.
type tokenBucket struct {
	ref     int // the token count the bucket was opened at
	key     int // its key in tokenPlans.byT: ref, or −ref for a host-free bucket
	passes  int // passes measured (the first is a warm-up)
	samples map[*unit][]float64
	freq    freqSamples // announced units' calls over the measured passes
	plan    *Plan
	in      PlanInput
	// free: the bucket's passes cannot compute host units (hostfree.go),
	// so its plans place none on the host.
	free bool
	// provisional: its plan was made without measuring its passes (a
	// host-free bucket opened by a pass that could not wait): its first
	// passes are measured and the measured plan replaces it.
	provisional bool
}

// tokenPlans is the engine's plan-per-tokens state.
type tokenPlans struct {
	passT    int // tokens of the pass in progress (0: unknown)
	profiled []float64
	cur      int                  // key of the bucket of the plan in force (0: not keyed)
	byT      map[int]*tokenBucket // by key (tokenBucket.key)
	cand     int                  // the bucket the last passes fell in, when not cur
	streak   int                  // passes in a row in cand
	measure  *tokenBucket
	measured int
	switches int
}

// passTokens reads the root's token count (0 without a TokenCounter).
func (e *engine) passTokens() int {
	if tc, ok := e.model.(TokenCounter); ok {
		return max(tc.PassTokens(), 0)
	}
	return 0
}

// startTokens keys the first plan by the profiling passes' median count.
func (t *tokenPlans) start(in *PlanInput) {
	t.cur, t.byT, t.cand, t.streak, t.measure = 0, map[int]*tokenBucket{}, 0, 0, nil
	if len(t.profiled) > 0 {
		in.Tokens = int(median(t.profiled) + 0.5)
	}
	t.profiled = nil
	if in.Tokens > 0 {
		t.cur = in.Tokens
		t.byT[t.cur] = &tokenBucket{ref: t.cur, key: t.cur}
	}
}

// bucketFor is the key of the bucket a pass of n tokens belongs to among
// the host-free buckets (free) or the others: the nearest by ratio within
// tokenFactor (the smaller on a tie), else a new one at n.
func (t *tokenPlans) bucketFor(n int, free bool) int {
	best, bestR := 0, 0.0
	for key, bk := range t.byT {
		if bk.free != free {
			continue
		}
		ref := bk.ref
		r := float64(max(n, ref)) / float64(min(n, ref))
		if r < tokenFactor && (best == 0 || r < bestR || (r == bestR && ref < t.byT[best].ref)) {
			best, bestR = key, r
		}
	}
	if best != 0 {
		return best
	}
	if free {
		return -n
	}
	return n
}

// tokensBegin is the root entry's part in INFERENCE: it places the pass in
// a bucket, marks it for measuring, or switches to the bucket's plan.
func (e *engine) tokensBegin() error {
	t := &e.tok
	t.measure = nil
	t.passT = e.passTokens()
	free := e.hostFreePass()
	if e.phase == PhaseInference && free && e.plan.HostUnits() > 0 {
		if err := e.leaveHost(); err != nil { // before the pass enters a host unit it cannot compute
			return err
		}
	}
	if e.phase != PhaseInference || t.cur == 0 || t.passT == 0 || e.noReplan ||
		e.replan.state == ReplanInProgress || e.replan.state == ReplanFailed {
		return nil
	}
	b := t.bucketFor(t.passT, free)
	if b != t.cur && e.hostOutgrown(t.passT) { // also while profiling is suspended (warm-ups, a bench's prefills)
		return e.leaveHostGrown(b)
	}
	if e.m.suspended > 0 {
		return nil
	}
	if b == t.cur {
		t.cand, t.streak = 0, 0
		if bk := t.byT[b]; bk.provisional {
			t.measure = bk
		}
		return nil
	}
	if b != t.cand {
		t.cand, t.streak = b, 0
	}
	t.streak++
	bk := t.byT[b]
	if bk == nil {
		bk = &tokenBucket{ref: max(b, -b), key: b, free: free}
		t.byT[b] = bk
	}
	if bk.plan == nil {
		t.measure = bk
		return nil
	}
	if t.streak < tokenSwitchPasses {
		return nil
	}
	return e.switchTokens(bk, "")
}

// hostOutgrown reports whether a pass of n tokens would stretch the plan
// in force's host units far past what they were planned for: the plan
// computes units on the host (none forced there by Config.HostUnits), and
// n is tokenFactor or more times its bucket's tokens. The host's compute
// grows with the tokens while a streamed unit's copy does not, so a prefill
// of thousands of tokens under a decode step's three-way plan would take
// seconds a host unit.
func (e *engine) hostOutgrown(n int) bool {
	t := &e.tok
	cur := t.byT[t.cur]
	return e.plan.HostUnits() > 0 && len(e.cfg.HostUnits) == 0 && cur != nil && n >= tokenFactor*cur.ref
}

// leaveHostGrown runs a pass that hostOutgrown under the plan of its
// bucket (key b) at once, without waiting for tokenSwitchPasses: the
// bucket's measured plan, or, when it has none yet, a provisional one made
// from the plan in force's input with the host taken out (as leaveHost
// does for a forward that cannot compute host units), measured and
// replaced by the bucket's three-way plan as a host-free bucket's is (the
// measuring waits for passes run with profiling not suspended).
func (e *engine) leaveHostGrown(b int) error {
	t := &e.tok
	bk := t.byT[b]
	if bk == nil {
		bk = &tokenBucket{ref: max(b, -b), key: b}
		t.byT[b] = bk
	}
	if bk.plan != nil {
		return e.switchTokens(bk, "at once: its passes carry too many tokens for the host units of the plan it replaces")
	}
	in := hostFreeInput(e.planIn, t.passT)
	plan, err := MakePlan(in)
	if err != nil {
		return fmt.Errorf("offload: a plan with no host unit for a pass of %d tokens: %w", t.passT, err)
	}
	bk.plan, bk.in, bk.provisional = &plan, in, true
	if err := e.switchTokens(bk, "with no host unit, provisional until its passes are measured (too many tokens for the host units of the plan it replaces)"); err != nil {
		return err
	}
	if e.m.suspended == 0 {
		t.measure = bk
	}
	return nil
}

// tokensCollect keeps the measured pass's unit compute times; once the
// bucket has a warm-up and ProfilingIters passes, it gets its plan.
func (e *engine) tokensCollect() error {
	bk := e.tok.measure
	e.tok.measure = nil
	if err := e.dev.Compute().Synchronize(); err != nil {
		return e.fail(err)
	}
	bk.passes++
	if bk.passes <= replanWarm {
		return nil
	}
	if bk.samples == nil {
		bk.samples = map[*unit][]float64{}
	}
	last, err := runSeconds(e.timing.current)
	if err != nil {
		return e.fail(err)
	}
	for u, sec := range last {
		bk.samples[u] = append(bk.samples[u], sec)
	}
	bk.freq.add(e, e.passCalls())
	if bk.passes < replanWarm+max(e.cfg.ProfilingIters, 1) {
		return nil
	}
	in := e.planIn
	in.Units = slices.Clone(in.Units)
	for _, u := range e.units {
		if s := bk.samples[u]; len(s) > 0 && !u.onHost { // a host unit's device time was not measured
			in.Units[u.idx].ComputeSec = median(s)
		}
	}
	bk.freq.apply(e, &in)
	in.Tokens = bk.ref
	if err := e.hostInputs(&in, !bk.free); err != nil { // the hop grows with the tokens
		return e.fail(err)
	}
	if bk.free {
		in = hostFreeInput(in, bk.ref)
	}
	plan, err := MakePlan(in)
	if err != nil {
		return e.fail(fmt.Errorf("planning for %d tokens per forward: %w", bk.ref, err))
	}
	bk.plan, bk.in, bk.samples, bk.freq = &plan, in, nil, freqSamples{}
	e.tok.measured++
	if bk.provisional { // the bucket's plan is in force: the measured one replaces it now
		bk.provisional = false
		return e.switchTokens(bk, "measured")
	}
	e.tracePlanIn(fmt.Sprintf("made for %d tokens per forward (not yet in force)", bk.ref), plan, bk.in, 0)
	return nil
}

// switchTokens puts bk's plan in force, keeping the plan it replaces (it
// may have been rebuilt by a strategy replan since) for its own bucket
// (unless that is bk: a provisional plan replaced by its measured one).
// why, when set, is said in the trace line.
func (e *engine) switchTokens(bk *tokenBucket, why string) error {
	t := &e.tok
	if old := t.byT[t.cur]; old != nil && old != bk {
		p := e.plan
		old.plan, old.in = &p, e.planIn
	}
	next := *bk.plan
	if slices.Equal(next.Resident, e.plan.Resident) && slices.Equal(next.Host, e.plan.Host) && next.Slots == e.plan.Slots && next.SlotBytes == e.plan.SlotBytes &&
		next.PoolSlots == e.plan.PoolSlots && next.PoolSlotBytes == e.plan.PoolSlotBytes {
		// Same placement: only the prediction and its tokens change.
		e.plan = next
	} else if err := e.replace(next); err != nil {
		return e.fail(fmt.Errorf("switching to the plan for %d tokens per forward: %w", bk.ref, err))
	}
	e.planIn = bk.in
	t.cur, t.cand, t.streak = bk.key, 0, 0
	t.switches++
	what := fmt.Sprintf("switched to %d tokens per forward", bk.ref)
	if bk.free {
		what += " with no host unit (forwards that cannot compute host units)"
	}
	if why != "" {
		what += ", " + why
	}
	e.tracePlan(what, e.plan, 0)
	return nil
}

// TokenPlans reports the manager's plans per tokens per forward (see
// TokenCounter).
func (m *Manager) TokenPlans() TokenPlanStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.e == nil {
		return TokenPlanStatus{}
	}
	t := m.e.tok
	st := TokenPlanStatus{PlanTokens: m.e.plan.Tokens, Measured: t.measured, Switches: t.switches,
		HostFree: t.cur != 0 && t.byT[t.cur] != nil && t.byT[t.cur].free}
	for key, bk := range t.byT {
		if bk.plan != nil || key == t.cur {
			if bk.free {
				st.FreeBuckets = append(st.FreeBuckets, bk.ref)
			} else {
				st.Buckets = append(st.Buckets, bk.ref)
			}
		}
	}
	sort.Ints(st.Buckets)
	sort.Ints(st.FreeBuckets)
	return st
}
