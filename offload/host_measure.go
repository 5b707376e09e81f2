package offload

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Measured host times. The first plan with host units rests on an estimate:
// a unit's bytes over the host backend's GEMV bandwidth (host.go). That
// times only the unit's matrices; its whole forward on the host also runs
// attention over the host KV cache, norms, RoPE and the activations'
// traffic, so the estimate is a lower bound and the first plan puts too
// many units on the host (on the H200, 5.2 ms a layer measured against
// ~3 ms estimated).
//
// So the engine times each host unit's whole forward (trap entry to exit
// on the host backend: everything but the hops, which the planner charges
// as HopSec) over the first passes of a plan with host units in INFERENCE:
// one warm-up pass (first-use allocations, the KV cache moving over), then
// Config.ProfilingIters passes. It keeps the median seconds per token of
// each unit for the plan's tokens-per-forward bucket and replans once with
// them (hostInputs): a measured unit's HostSecPerToken is its measurement
// turned back into its time alone (hostAloneTimes: the measurement ran
// beside the plan's copies, whose sharing of the host's memory the planner
// models itself, so it must not count twice);
// a unit that did not run on the host keeps the estimate, scaled by the
// median measured/estimated ratio of the measured units when that ratio
// exceeds 1 (units of one model share their shape; the estimate, a lower
// bound, is never scaled down). The new plan is applied when it predicts a
// faster forward than the plan in force under the measured times;
// otherwise the placement stays and only its prediction is corrected. Each
// bucket is measured once (a bucket's later plans reuse its times).
//
// Why INFERENCE and not PROFILING: in PROFILING every unit runs staged on
// the device and host placement is decided only when it ends; a unit's
// forward on the host needs the model to run it there, with its hidden
// state and KV cache moved to the host (decoder.Model does so for the units
// RunsOn names, in INFERENCE). Timing the host units the plan chose, under
// that plan, measures exactly the forwards the prediction is about, and the
// engine's replan machinery (replace) moves units between placements.
// Units the estimate kept off the host are not timed: the estimate is a
// lower bound, so the measured times would keep them off too.

// hostMeasure is the engine's per-unit host timing.
type hostMeasure struct {
	on      bool                // the pass in progress is measured
	key     int                 // the bucket (PlanInput.Tokens) being measured
	passes  int                 // passes measured for key (the first is a warm-up)
	samples map[*unit][]float64 // seconds per token of the measured passes
	// byT is each measured bucket's host seconds per token per unit alone:
	// the median measured inside the forward, divided by the sharing of the
	// host's memory with the copies the model predicts (hostAloneTimes);
	// inHybrid holds the medians as measured.
	byT      map[int]map[*unit]float64
	inHybrid map[int]map[*unit]float64
	replans  int // replans made from measured host times
	applied  int // of which changed the placement

	// copies are the streamed units' copies timed in the measured passes;
	// copyByT each measured bucket's copy correction (host_copyrate.go).
	copies  []copySample
	copyByT map[int]hostCopyScale
}

// hostMeasureBegin decides at the root's entry whether the pass measures
// the plan's host units: in INFERENCE, under a plan with host units whose
// bucket has no measurement yet, outside a strategy replan or a bucket's own
// measuring, with profiling not suspended, and with replans allowed.
func (e *engine) hostMeasureBegin() {
	h := &e.hm
	h.on = false
	defer e.hostCopyBegin()
	if e.phase != PhaseInference || e.cfg.HostBackend == nil || e.plan.HostUnits() == 0 || e.m.suspended > 0 || e.noReplan ||
		e.replan.state == ReplanInProgress || e.replan.state == ReplanFailed || e.tok.measure != nil {
		return
	}
	t := &e.tok
	if t.cur != 0 && t.passT > 0 && t.bucketFor(t.passT, false) != t.cur {
		return // a pass of another size: not what the plan in force predicts
	}
	key := e.planIn.Tokens
	if _, done := h.byT[key]; done {
		return
	}
	if h.samples == nil || h.key != key {
		h.key, h.passes, h.samples, h.copies = key, 0, map[*unit][]float64{}, nil
	}
	h.on = true
}

// hostMeasureRun records host unit u's run of the measured pass.
func (e *engine) hostMeasureRun(u *unit) {
	h := &e.hm
	if !h.on || h.passes < replanWarm {
		return
	}
	h.samples[u] = append(h.samples[u], u.hostLast/float64(max(e.tok.passT, 1)))
}

// hostMeasureEnd counts a measured pass; after the warm-up and
// ProfilingIters passes it keeps the bucket's medians and replans.
func (e *engine) hostMeasureEnd() error {
	h := &e.hm
	h.on = false
	if err := e.hostCopyCollect(h.passes >= replanWarm); err != nil {
		return e.fail(fmt.Errorf("timing copies beside host units: %w", err))
	}
	h.passes++
	if h.passes < replanWarm+max(e.cfg.ProfilingIters, 1) {
		return nil
	}
	e.hostCopyFinish(h.key)
	meds := map[*unit]float64{}
	byIdx := map[int]float64{}
	for u, s := range h.samples {
		meds[u] = median(s)
		byIdx[u.idx] = meds[u]
	}
	// The measurements ran beside the plan's copies: the model's alone
	// times are what they are divided by the sharing (planner_share.go).
	// The copies they ran beside are the measured ones (host_copyrate.go).
	inM := e.planIn
	inM.TransferScale = e.transferScale(h.key)
	alone := hostAloneTimes(inM, e.plan, byIdx)
	conv := map[*unit]float64{}
	for u := range meds {
		conv[u] = alone[u.idx]
	}
	if h.byT == nil {
		h.byT = map[int]map[*unit]float64{}
		h.inHybrid = map[int]map[*unit]float64{}
	}
	h.byT[h.key] = conv
	h.inHybrid[h.key] = meds
	e.traceHostUnits(meds)
	h.samples, h.passes = nil, 0
	return e.hostReplan()
}

// hostReplan plans again with the measured host times and applies the plan
// when it beats the plan in force under those times.
func (e *engine) hostReplan() error {
	in := e.planIn
	in.Units = slices.Clone(in.Units)
	if err := e.hostInputs(&in, true); err != nil {
		return e.fail(fmt.Errorf("replanning with measured host times: %w", err))
	}
	cur, ok := PredictPlan(in, e.plan)
	plan, err := MakePlan(in)
	if err != nil {
		return e.fail(fmt.Errorf("replanning with measured host times: %w", err))
	}
	e.hm.replans++
	if ok && plan.PredictedSec >= cur*0.99 {
		e.planIn = in
		e.plan.PredictedSec = cur
		if f, ok := hostFloor(in, e.plan); ok {
			e.plan.FloorSec = f // the estimate's floor no longer holds either
		}
		e.tracePlan(fmt.Sprintf("kept after measuring host units (the best plan predicts %.2f ms%s)", plan.PredictedSec*1e3, e.copyNote(in.Tokens)), e.plan, 0)
		return nil
	}
	t0 := time.Now()
	if err := e.replace(plan); err != nil {
		return e.fail(fmt.Errorf("replanning with measured host times: %w", err))
	}
	e.planIn = in
	e.hm.applied++
	e.tracePlan(fmt.Sprintf("replaced after measuring host units (the old one predicts %.2f ms with them%s)", cur*1e3, e.copyNote(in.Tokens)), plan, time.Since(t0))
	return nil
}

// hostSecPerToken is unit u's host seconds per token for the planner at
// bucket tokens: measured, or the bandwidth estimate est (scaled by ratio
// when it is above 1; see above).
func (h *hostMeasure) hostSecPerToken(u *unit, tokens int, est, ratio float64) float64 {
	if s, ok := h.byT[tokens][u]; ok {
		return s
	}
	if ratio > 1 {
		return est * ratio
	}
	return est
}

// hostRatio is the median measured/estimated host time of the units
// measured at bucket tokens (0 when none); est gives a unit's estimate.
func (h *hostMeasure) hostRatio(tokens int, est func(*unit) float64) float64 {
	var rs []float64
	for u, s := range h.byT[tokens] {
		if e := est(u); e > 0 {
			rs = append(rs, s/e)
		}
	}
	return median(rs)
}

// HostTimes is a snapshot of the engine's measured host times.
type HostTimes struct {
	// Replans counts replans made from measured host times (one per
	// measured tokens-per-forward bucket); Applied counts those that changed
	// the placement.
	Replans, Applied int
	// SecPerToken is the measured host seconds per token of each unit that
	// was timed on the host, for the plan in force's bucket.
	SecPerToken map[string]float64
	// AloneSecPerToken is the same units' time alone that the planner
	// uses: the measurement divided by the sharing of the host's memory
	// with the copies (equal to SecPerToken without a DRAM figure).
	AloneSecPerToken map[string]float64
	// CopyScale is the factor the measured copies put on the plan's copy
	// times for the plan in force's bucket (>= 1; 0 when none was measured:
	// no copy sample, or FT_HOST_COPY_MEASURE=0); CopySamples the copies it
	// rests on, CopyBytesPerSec and ProfiledCopyBytesPerSec their median
	// measured rate and the profiled curve's for them (host_copyrate.go).
	CopyScale                                float64
	CopySamples                              int
	CopyBytesPerSec, ProfiledCopyBytesPerSec float64
}

// HostTimes reports the manager's measured host times (see HostTimes).
func (m *Manager) HostTimes() HostTimes {
	m.mu.Lock()
	defer m.mu.Unlock()
	ht := HostTimes{SecPerToken: map[string]float64{}, AloneSecPerToken: map[string]float64{}}
	if m.e == nil {
		return ht
	}
	ht.Replans, ht.Applied = m.e.hm.replans, m.e.hm.applied
	for u, s := range m.e.hm.inHybrid[m.e.planIn.Tokens] {
		ht.SecPerToken[u.name] = s
	}
	for u, s := range m.e.hm.byT[m.e.planIn.Tokens] {
		ht.AloneSecPerToken[u.name] = s
	}
	if cs, ok := m.e.hm.copyByT[m.e.planIn.Tokens]; ok {
		ht.CopyScale, ht.CopySamples = cs.scale, cs.n
		ht.CopyBytesPerSec, ht.ProfiledCopyBytesPerSec = cs.measured, cs.profiled
	}
	return ht
}

// hostUnitsLine lists the measured host units' medians (ms per token) in
// unit order, a unit that begins a host stretch (its predecessor not on the
// host) marked "*", with the first and last sample of each.
func (e *engine) hostUnitsLine(meds map[*unit]float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "host units measured, ms a token in unit order (median [first..last sample], * begins a host stretch):")
	for i, u := range e.units {
		m, ok := meds[u]
		if !ok {
			continue
		}
		mark := ""
		if i == 0 || !e.units[i-1].onHost {
			mark = "*"
		}
		s := e.hm.samples[u]
		fmt.Fprintf(&b, " %s%.2f", mark, m*1e3)
		if len(s) > 0 {
			fmt.Fprintf(&b, "[%.2f..%.2f]", s[0]*1e3, s[len(s)-1]*1e3)
		}
	}
	return b.String()
}

// traceHostUnits reports hostUnitsLine to the configured Trace (FT_TRACE=1).
func (e *engine) traceHostUnits(meds map[*unit]float64) {
	if e.cfg.Trace != nil {
		e.cfg.Trace(e.hostUnitsLine(meds), 0)
	}
}
