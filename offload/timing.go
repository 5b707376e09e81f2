package offload

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/flextensor-go/flextensor/runtime"
)

// TrapTimingRecord is one trap (unit) in one pass.
type TrapTimingRecord struct {
	Trap       string  // the unit's qualified name
	Streamed   bool    // false for a resident unit
	Bytes      int64   // bytes copied for it (0 when resident)
	TransferMs float64 // its host-to-device copy (0 when resident)
	ComputeMs  float64 // from its entry (after any wait) to its exit, on the compute stream
	WaitMs     float64 // how long compute stalled waiting for its copy
	// Announced is true for a data-dependent unit (pool.go), which may
	// have zero, one or several records in a pass; Hit is then true when
	// the call needed no copy (resident, or found in a pool slot).
	Announced, Hit bool
	// Host is true for a unit the plan computes on the host CPU
	// (Config.HostBackend); HostMs is then its wall time there (Streamed is
	// false and the device columns are 0).
	Host   bool
	HostMs float64
}

// OffloadTimingSnapshot is one measured forward pass.
type OffloadTimingSnapshot struct {
	Pass        int
	ForwardMs   float64 // root entry to root exit on the compute stream
	PredictedMs float64 // the plan's prediction for one forward
	Tokens      int     // the tokens the pass carried (0: unknown; see TokenCounter)
	PlanTokens  int     // the tokens per forward the plan in force was made for
	Records     []TrapTimingRecord
	// Pool counts the pass's calls of announced units (zero without any),
	// including copies issued for units announced and then not run.
	Pool PoolStats
}

// TrapTimingStats aggregates one trap over the window's passes.
type TrapTimingStats struct {
	Trap     string
	Streamed bool
	// Announced marks a data-dependent unit: its samples are per run (it
	// may run zero or several times a pass) and Passes counts runs.
	Announced bool
	// Host marks a unit computed on the host CPU; HostMs holds its wall
	// times.
	Host   bool
	Passes int
	Bytes  int64 // the unit's weight bytes (0 for a manual block)
	// Per-pass samples, in pass order.
	TransferMs, ComputeMs, WaitMs, HostMs []float64
}

// MedianHostMs is the median host wall time (0 for a unit not on the host).
func (s TrapTimingStats) MedianHostMs() float64 { return median(s.HostMs) }

// SampleStats summarises one column of a trap's samples over a window.
type SampleStats struct {
	Min, Max, Avg, Median float64
	// Std is the population standard deviation (0 for one sample).
	Std float64
}

// statsOf summarises xs (all zero when empty).
func statsOf(xs []float64) SampleStats {
	if len(xs) == 0 {
		return SampleStats{}
	}
	s := SampleStats{Min: slices.Min(xs), Max: slices.Max(xs), Median: median(xs)}
	var sum float64
	for _, x := range xs {
		sum += x
	}
	s.Avg = sum / float64(len(xs))
	var sq float64
	for _, x := range xs {
		sq += (x - s.Avg) * (x - s.Avg)
	}
	s.Std = math.Sqrt(sq / float64(len(xs)))
	return s
}

// ComputeStats is the min, max, average, median and standard deviation of
// the compute samples (the seed's compute_min ... compute_std).
func (s TrapTimingStats) ComputeStats() SampleStats { return statsOf(s.ComputeMs) }

// TransferStats summarises the transfer samples (transfer_min ... transfer_std).
func (s TrapTimingStats) TransferStats() SampleStats { return statsOf(s.TransferMs) }

// WaitStats summarises the wait samples (wait_min ... wait_std).
func (s TrapTimingStats) WaitStats() SampleStats { return statsOf(s.WaitMs) }

// MedianTransferMs is the median transfer time.
func (s TrapTimingStats) MedianTransferMs() float64 { return median(s.TransferMs) }

// MedianComputeMs is the median compute time.
func (s TrapTimingStats) MedianComputeMs() float64 { return median(s.ComputeMs) }

// MedianWaitMs is the median stall.
func (s TrapTimingStats) MedianWaitMs() float64 { return median(s.WaitMs) }

// MinComputeBudgetMs is the smallest compute budget ComputeBudgetMs
// returns: a trap with no samples, or one measured as taking no time, still
// gets a positive hiding window.
const MinComputeBudgetMs = 1e-3

// ComputeBudgetMs is the positive compute budget (ms) the planner should
// assume for this trap: the median of its compute samples or, with
// conservative, the smallest (the tightest hiding window seen across noisy
// passes). It is never below MinComputeBudgetMs, also with no samples.
// Transfers and waits are not part of it: transfer cost stays on the
// profiled size→time curve, and a wait is an outcome of a plan, not a cost.
func (s TrapTimingStats) ComputeBudgetMs(conservative bool) float64 {
	if len(s.ComputeMs) == 0 {
		return MinComputeBudgetMs
	}
	b := median(s.ComputeMs)
	if conservative {
		b = slices.Min(s.ComputeMs)
	}
	if !(b >= MinComputeBudgetMs) { // also NaN
		return MinComputeBudgetMs
	}
	return b
}

// TotalComputeMs is the pass's compute summed over its traps.
func (s OffloadTimingSnapshot) TotalComputeMs() float64 {
	return s.sum(func(r TrapTimingRecord) float64 { return r.ComputeMs })
}

// TotalTransferMs is the pass's host-to-device copy time summed over its
// traps.
func (s OffloadTimingSnapshot) TotalTransferMs() float64 {
	return s.sum(func(r TrapTimingRecord) float64 { return r.TransferMs })
}

// TotalWaitMs is the pass's stall summed over its traps.
func (s OffloadTimingSnapshot) TotalWaitMs() float64 {
	return s.sum(func(r TrapTimingRecord) float64 { return r.WaitMs })
}

func (s OffloadTimingSnapshot) sum(f func(TrapTimingRecord) float64) float64 {
	var t float64
	for _, r := range s.Records {
		t += f(r)
	}
	return t
}

// OffloadTimingReport is the timing of a window of INFERENCE passes: the
// passes (Snapshots, the canonical data), each trap's samples over them
// (Traps), and what the plan predicted.
type OffloadTimingReport struct {
	Snapshots      []OffloadTimingSnapshot
	Traps          []TrapTimingStats // in execution order
	ForwardMs      float64           // median measured forward
	PredictedMs    float64           // the plan's prediction
	FloorMs        float64           // max(compute, streamed bytes over the measured curve)
	H2DGBps        float64           // achieved copy bandwidth: bytes copied / copy time
	StreamedBytes  int64             // bytes copied per pass (the pool's: the window's average)
	ResidentUnits  int
	StreamedUnits  int
	HostUnits      int // units computed on the host CPU
	TransferBlocks int
	// With host units: the host's DRAM read figure the plan was made with
	// (GB/s, 0: not modelled) and the plan's host units' predicted time per
	// pass, summed, beside the copies (the shared-read model,
	// planner_share.go) and alone.
	HostReadGBps                       float64
	PredictedHostMs, PredictedHostSolo float64
	// PlanTokens is the tokens per forward the plan in force was made for
	// (0: unknown; see TokenCounter).
	PlanTokens int
	// DroppedPasses counts passes measured before the plan in force moved
	// units between placements (a measured-host replan, a switch between
	// tokens-per-forward plans, a strategy replan): they are not in the
	// window, which holds only passes of the placement its rows show.
	DroppedPasses int
	// Announced has one row per group of announced (data-dependent)
	// units, such as an MoE model's experts (empty without any); Pool sums
	// the passes' pool counts, and the plan's pool and expectations are
	// beside them.
	Announced         []AnnouncedGroupStats
	Pool              PoolStats
	PoolSlots         int
	PoolSlotBytes     int64
	ExpectedMissRate  float64 // the plan's, over streamed announced calls
	ExpectedPoolBytes float64 // the plan's bytes copied into the pool per pass
}

// AnnouncedGroupStats is one group of announced units over a report's
// window: the units whose names differ only in numbers ("model.layers.*.
// mlp.experts.*").
type AnnouncedGroupStats struct {
	Group           string
	Units, Resident int   // units in the group, of which resident
	Calls           int64 // calls over the window
	Hits            int64 // calls that needed no copy (resident or in a pool slot)
	StreamedCalls   int64 // calls of streamed units
	StreamedHits    int64 // of those, found in a pool slot
	CopiedBytes     int64 // bytes copied for the calls
	Passes, Tokens  int   // passes in the window and the tokens they carried (0: unknown)
	// ExpectedMissRate is the plan's expected share of the group's
	// streamed calls that copy (StreamedMissRate measures it).
	ExpectedMissRate float64
	// The calls' summed times over the window (ms).
	TransferMs, ComputeMs, WaitMs float64
}

// HitRate is the share of the group's calls that needed no copy (0 with
// no calls).
func (g AnnouncedGroupStats) HitRate() float64 {
	if g.Calls == 0 {
		return 0
	}
	return float64(g.Hits) / float64(g.Calls)
}

// StreamedMissRate is the share of the streamed units' calls that needed a
// copy: what the plan's ExpectedMissRate predicts (0 with no such calls).
func (g AnnouncedGroupStats) StreamedMissRate() float64 {
	if g.StreamedCalls == 0 {
		return 0
	}
	return 1 - float64(g.StreamedHits)/float64(g.StreamedCalls)
}

// BytesPerPass is the bytes copied for the group's calls per pass.
func (g AnnouncedGroupStats) BytesPerPass() float64 {
	if g.Passes == 0 {
		return 0
	}
	return float64(g.CopiedBytes) / float64(g.Passes)
}

// BytesPerToken is the bytes copied per token the passes carried (0 when
// the tokens are unknown).
func (g AnnouncedGroupStats) BytesPerToken() float64 {
	if g.Tokens == 0 {
		return 0
	}
	return float64(g.CopiedBytes) / float64(g.Tokens)
}

// groupName is a unit's group: its name with every numeric part a "*".
func groupName(name string) string {
	parts := strings.Split(name, ".")
	for i, p := range parts {
		if p != "" && strings.Trim(p, "0123456789") == "" {
			parts[i] = "*"
		}
	}
	return strings.Join(parts, ".")
}

// NumPasses is the number of passes in the report.
func (r *OffloadTimingReport) NumPasses() int {
	if r == nil {
		return 0
	}
	return len(r.Snapshots)
}

func (r *OffloadTimingReport) sum(f func(OffloadTimingSnapshot) float64) float64 {
	var t float64
	if r != nil {
		for _, s := range r.Snapshots {
			t += f(s)
		}
	}
	return t
}

func (r *OffloadTimingReport) avg(sum float64) float64 {
	if r.NumPasses() == 0 {
		return 0
	}
	return sum / float64(r.NumPasses())
}

// TotalComputeSum is the passes' total compute, summed over passes.
func (r *OffloadTimingReport) TotalComputeSum() float64 {
	return r.sum(OffloadTimingSnapshot.TotalComputeMs)
}

// TotalTransferSum is the passes' total copy time, summed over passes.
func (r *OffloadTimingReport) TotalTransferSum() float64 {
	return r.sum(OffloadTimingSnapshot.TotalTransferMs)
}

// TotalWaitSum is the passes' total stall, summed over passes.
func (r *OffloadTimingReport) TotalWaitSum() float64 {
	return r.sum(OffloadTimingSnapshot.TotalWaitMs)
}

// TotalComputeAvg is TotalComputeSum per pass (0 with no passes).
func (r *OffloadTimingReport) TotalComputeAvg() float64 { return r.avg(r.TotalComputeSum()) }

// TotalTransferAvg is TotalTransferSum per pass (0 with no passes).
func (r *OffloadTimingReport) TotalTransferAvg() float64 { return r.avg(r.TotalTransferSum()) }

// TotalWaitAvg is TotalWaitSum per pass (0 with no passes).
func (r *OffloadTimingReport) TotalWaitAvg() float64 { return r.avg(r.TotalWaitSum()) }

// ComputeBudgetsByProfileLabel maps the report's compute budgets onto
// profile labels by index: trap i's budget (ComputeBudgetMs) is labels[i]'s.
// The report's names may differ from the profile's (shortened, say); the
// pairing is by position only. labels must have one distinct label per
// trap: a different count, an empty or a repeated label is an error.
func (r *OffloadTimingReport) ComputeBudgetsByProfileLabel(labels []string, conservative bool) (map[string]float64, error) {
	n := 0
	if r != nil {
		n = len(r.Traps)
	}
	if len(labels) != n {
		return nil, fmt.Errorf("ComputeBudgetsByProfileLabel: %d labels for %d traps; want one label per trap, in the report's order", len(labels), n)
	}
	out := make(map[string]float64, n)
	for i, l := range labels {
		if l == "" {
			return nil, fmt.Errorf("ComputeBudgetsByProfileLabel: label %d (for trap %s) is empty", i, r.Traps[i].Trap)
		}
		if _, dup := out[l]; dup {
			return nil, fmt.Errorf("ComputeBudgetsByProfileLabel: label %q given twice (at %d)", l, i)
		}
		out[l] = r.Traps[i].ComputeBudgetMs(conservative)
	}
	return out, nil
}

// timingState collects passes between ResetOffloadTiming calls.
type timingState struct {
	pass      int
	rootStart runtime.Event
	current   []unitRun
	pool      PoolStats // the pass's announced-unit counts
	blocks    []blockRun
	host      []hostRun // the pass's host-computed units
	snaps     []OffloadTimingSnapshot
	// pending is graph mode's last measured pass, kept until
	// UpdateOffloadTiming stores it (or the next pass replaces it).
	pending *OffloadTimingSnapshot
	// lastGen is the replay generation UpdateOffloadTiming last stored
	// (-1: none, or stored without a generation).
	lastGen int
	// dropPass marks the pass in progress as run under a placement that a
	// replan replaced at its end (replacedPlacement): it is not stored.
	dropPass bool
	// dropped counts the passes dropped since the last collect or reset
	// because a replan changed the placement after them.
	dropped int
}

// replacedPlacement is called when the engine moves units between
// placements (replace): the passes measured so far ran under the old plan,
// so the window drops them (and the pass in progress, when the move comes at
// its end) and starts again. A window mixing placements would give a unit
// the label of its first pass and the samples of both (a host unit with
// transfer times, a streamed one with host times), and a forward median
// that belongs to neither plan.
func (t *timingState) replacedPlacement() {
	t.dropped += len(t.snaps)
	t.snaps = nil
	if t.pending != nil {
		t.dropped++
		t.pending = nil
	}
	if t.rootStart != nil { // the pass ending now ran under the old plan
		t.dropPass = true
	}
}

func (t *timingState) begin(e *engine) error {
	ev, err := e.dev.Compute().Record()
	if err != nil {
		return err
	}
	t.rootStart = ev
	t.current, t.host = t.current[:0], t.host[:0]
	t.dropPass = false
	return nil
}

// hostRun is one run of a host-computed unit in the pass being measured.
type hostRun struct {
	u   *unit
	sec float64
}

// unitRun is one run of a unit in the pass being measured: a unit may run
// more than once (an announced unit), so its events are kept per run.
type unitRun struct {
	u                     *unit
	start, end, waitStart runtime.Event
	copyRec               *copyTiming
	hit                   bool
	resident              bool // the unit's placement when it ran
}

// unitDone moves the events of u's run that just ended into the pass.
func (t *timingState) unitDone(u *unit) {
	t.current = append(t.current, unitRun{u: u, start: u.start, end: u.end, waitStart: u.waitStart, copyRec: u.copyRec, hit: u.lastHit, resident: u.resident})
	u.start, u.end, u.waitStart, u.copyRec = nil, nil, nil, nil
}

// elapsed is the run's compute time (ok false when an event is missing).
func (r unitRun) elapsed() (float64, bool, error) {
	if r.start == nil || r.end == nil {
		return 0, false, nil
	}
	d, err := r.end.ElapsedSince(r.start)
	return d.Seconds(), err == nil, err
}

func (t *timingState) abort() {
	for _, r := range t.current {
		r.u.start, r.u.end, r.u.waitStart, r.u.copyRec = nil, nil, nil, nil
	}
	t.current, t.blocks, t.host, t.rootStart, t.pool = t.current[:0], t.blocks[:0], t.host[:0], nil, PoolStats{}
	t.dropPass = false
}

// end resolves the pass's events (waiting for them) into a snapshot.
func (t *timingState) end(e *engine) error {
	c := e.dev.Compute()
	endEv, err := c.Record()
	if err != nil {
		return err
	}
	if err := endEv.Synchronize(); err != nil {
		return err
	}
	// Only this pass's copies are waited for (each is done by now: its
	// unit's compute waited on it). Waiting for the copy stream instead
	// would also wait for the next pass's first units, which the ring
	// prefetches as this pass's last ones run: with host units at the
	// start of the model that serialises up to a transfer block per slot
	// that the next pass's host compute would hide, and only when timing
	// is on, so the report would slow down the forwards it times.
	for _, run := range t.current {
		if run.copyRec != nil {
			if err := run.copyRec.end.Synchronize(); err != nil {
				return err
			}
		}
	}
	snap := OffloadTimingSnapshot{PredictedMs: e.plan.PredictedSec * 1e3, Tokens: e.tok.passT, PlanTokens: e.plan.Tokens, Pool: t.pool}
	if t.rootStart != nil {
		d, err := endEv.ElapsedSince(t.rootStart)
		if err != nil {
			return err
		}
		snap.ForwardMs = ms(d.Seconds())
	}
	hosts := t.host
	addHost := func(before int) { // the host runs of units before unit index before
		for len(hosts) > 0 && hosts[0].u.idx < before {
			snap.Records = append(snap.Records, TrapTimingRecord{Trap: hosts[0].u.name, Host: true, HostMs: ms(hosts[0].sec)})
			hosts = hosts[1:]
		}
	}
	for _, run := range t.current {
		u := run.u
		addHost(u.idx)
		r := TrapTimingRecord{Trap: u.name, Streamed: !run.resident, Announced: u.announced, Hit: u.announced && run.hit}
		sec, ok, err := run.elapsed()
		if err != nil {
			return err
		}
		if ok {
			r.ComputeMs = ms(sec)
		}
		if run.waitStart != nil && run.start != nil {
			d, err := run.start.ElapsedSince(run.waitStart)
			if err != nil {
				return err
			}
			r.WaitMs = ms(max(d.Seconds(), 0))
		}
		if run.copyRec != nil {
			d, err := run.copyRec.end.ElapsedSince(run.copyRec.start)
			if err != nil {
				return err
			}
			r.TransferMs, r.Bytes = ms(d.Seconds()), run.copyRec.bytes
		}
		snap.Records = append(snap.Records, r)
	}
	addHost(len(e.units))
	t.host = t.host[:0]
	t.pool = PoolStats{}
	for _, br := range t.blocks {
		d, err := br.end.ElapsedSince(br.start)
		if err != nil {
			return err
		}
		snap.Records = append(snap.Records, TrapTimingRecord{Trap: br.name, ComputeMs: ms(d.Seconds())})
	}
	t.blocks = t.blocks[:0]
	t.current, t.rootStart = t.current[:0], nil
	if t.dropPass { // measured under the placement a replan just replaced
		t.dropPass = false
		t.dropped++
		return nil
	}
	if e.cfg.OffloadTiming == TimingGraph {
		t.pending = &snap
		return nil
	}
	t.store(snap)
	return nil
}

// store adds a pass to the window.
func (t *timingState) store(snap OffloadTimingSnapshot) {
	snap.Pass = t.pass
	t.pass++
	t.snaps = append(t.snaps, snap)
}

// publish stores graph mode's pending pass once per replay generation: gen
// ≥ 0 equal to the generation stored last is the same replay again and
// stores nothing; -1 stores whatever is pending.
func (t *timingState) publish(gen int) {
	if gen >= 0 && gen == t.lastGen {
		return
	}
	if t.pending == nil {
		return
	}
	t.store(*t.pending)
	t.pending, t.lastGen = nil, gen
}

func ms(sec float64) float64 { return sec * 1e3 }

// report aggregates the window.
func (t *timingState) report(e *engine) *OffloadTimingReport {
	if len(t.snaps) == 0 {
		return nil
	}
	r := &OffloadTimingReport{Snapshots: slices.Clone(t.snaps), PredictedMs: e.plan.PredictedSec * 1e3,
		FloorMs: e.plan.FloorSec * 1e3, TransferBlocks: e.plan.Slots, PlanTokens: e.plan.Tokens, DroppedPasses: t.dropped}
	idx := map[string]int{}
	unitBytes := map[string]int64{}
	for _, u := range e.units {
		unitBytes[u.name] = u.bytes
	}
	var fwd []float64
	var copied int64
	var copySec float64
	for _, s := range t.snaps {
		fwd = append(fwd, s.ForwardMs)
		for _, rec := range s.Records {
			i, ok := idx[rec.Trap]
			if !ok {
				i = len(r.Traps)
				idx[rec.Trap] = i
				r.Traps = append(r.Traps, TrapTimingStats{Trap: rec.Trap, Streamed: rec.Streamed, Announced: rec.Announced, Host: rec.Host, Bytes: unitBytes[rec.Trap]})
			}
			st := &r.Traps[i]
			st.Passes++
			st.TransferMs = append(st.TransferMs, rec.TransferMs)
			st.ComputeMs = append(st.ComputeMs, rec.ComputeMs)
			st.WaitMs = append(st.WaitMs, rec.WaitMs)
			if rec.Host {
				st.HostMs = append(st.HostMs, rec.HostMs)
			}
			copied += rec.Bytes
			copySec += rec.TransferMs / 1e3
		}
	}
	r.ForwardMs = median(fwd)
	r.announcedGroups(e, t.snaps)
	if copySec > 0 {
		r.H2DGBps = float64(copied) / copySec / 1e9
	}
	for _, u := range e.units {
		if u.onHost {
			r.HostUnits++
		} else if u.resident {
			r.ResidentUnits++
		} else {
			r.StreamedUnits++
			if !u.announced { // the pool's copies are measured (announcedGroups)
				r.StreamedBytes += u.bytes
			}
		}
	}
	if r.HostUnits > 0 {
		r.HostReadGBps = e.planIn.HostReadBytesPerSec / 1e9
		if runs, _, ok := hostRunTimes(e.planIn, e.plan); ok {
			for u, run := range runs {
				if e.plan.IsHost(u) {
					r.PredictedHostMs += run * 1e3
					r.PredictedHostSolo += e.planIn.hostSec(u) * 1e3
				}
			}
		}
	}
	return r
}

// CollectOffloadTiming drains the passes measured since the last collect
// or reset into a report: a second call without new passes returns nil. It
// returns nil (and no error) when timing is off, when the manager holds no
// model, or when no pass was measured; in graph mode only passes stored by
// UpdateOffloadTiming count. The error is for a failed engine.
func (m *Manager) CollectOffloadTiming() (*OffloadTimingReport, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.e == nil || m.e.cfg.OffloadTiming == TimingOff {
		return nil, nil
	}
	if m.e.failed != nil {
		return nil, fmt.Errorf("offload manager %q: CollectOffloadTiming: %w: %v", m.name, ErrEngineFailed, m.e.failed)
	}
	r := m.e.timing.report(m.e)
	m.e.timing.snaps = nil
	if r != nil {
		m.e.timing.dropped = 0
	}
	return r, nil
}

// ResetOffloadTiming starts a fresh window: the passes measured so far (and
// graph mode's unstored one) are dropped.
func (m *Manager) ResetOffloadTiming() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.e != nil {
		m.e.timing.snaps, m.e.timing.pending, m.e.timing.dropped = nil, nil, 0
	}
}

// UpdateOffloadTiming stores the pass just measured into the collector
// (graph mode): call it after each graph replay, or forward, that is to
// count; a measured pass that is not stored is replaced by the next one.
// replayGeneration identifies the replay: a generation ≥ 0 equal to the one
// stored last is the same replay reported twice (by the caller and a
// serving hook, say) and stores nothing; -1 stores whatever pass is
// pending. In eager mode passes store themselves and this does nothing. It
// reports false only when the engine has failed.
func (m *Manager) UpdateOffloadTiming(replayGeneration int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.e == nil || m.e.cfg.OffloadTiming != TimingGraph || m.e.phase != PhaseInference {
		return true
	}
	if m.e.failed != nil {
		return false
	}
	m.e.timing.publish(replayGeneration)
	return true
}

// TimingData is what FormatOffloadTimingTable renders: one pass
// (OffloadTimingSnapshot or *OffloadTimingSnapshot) or a window
// (*OffloadTimingReport).
type TimingData interface {
	timingTable() string
}

// FormatOffloadTimingTable renders a single pass or a report as a table.
// A report has one row per trap with median transfer, compute and wait, then
// the average pass totals, the forward, its prediction and floor, and the
// achieved copy bandwidth; a snapshot has one row per trap of that pass and
// its totals. A nil report (timing off, nothing measured) renders as a line
// saying so.
func FormatOffloadTimingTable(data TimingData) string {
	const none = "offload timing: no measured passes (is OffloadTiming off?)\n"
	switch d := data.(type) {
	case nil:
		return none
	case *OffloadTimingReport:
		if d == nil {
			return none
		}
	case *OffloadTimingSnapshot:
		if d == nil {
			return none
		}
	}
	return data.timingTable()
}

const (
	tableHead = "%-28s %-8s %10s %12s %11s %9s %9s\n"
	tableRow  = "%-28s %-8s %10.1f %12.3f %11.3f %9.3f %9.3f\n"
)

// placeOf is a unit's placement in the timing table: resident, streamed or
// host.
func placeOf(streamed, host bool) string {
	if host {
		return "host"
	}
	return placeName(streamed)
}

func placeName(streamed bool) string {
	if streamed {
		return "streamed"
	}
	return "resident"
}

func (r *OffloadTimingReport) timingTable() string {
	var b strings.Builder
	fmt.Fprintf(&b, tableHead, "unit", "place", "MiB", "transfer ms", "compute ms", "wait ms", "host ms")
	for _, t := range r.Traps {
		if t.Announced {
			continue // one row per group below
		}
		fmt.Fprintf(&b, tableRow, t.Trap, placeOf(t.Streamed, t.Host), float64(t.Bytes)/(1<<20),
			t.MedianTransferMs(), t.MedianComputeMs(), t.MedianWaitMs(), t.MedianHostMs())
	}
	r.groupRows(&b)
	fmt.Fprintf(&b, "per pass (average of %d): transfer %.3f ms, compute %.3f ms, wait %.3f ms\n",
		r.NumPasses(), r.TotalTransferAvg(), r.TotalComputeAvg(), r.TotalWaitAvg())
	fmt.Fprintf(&b, "forward %.3f ms (median of %d passes); plan predicted %.3f ms, floor %.3f ms\n",
		r.ForwardMs, len(r.Snapshots), r.PredictedMs, r.FloorMs)
	fmt.Fprintf(&b, "%d resident / %d streamed units, %d transfer blocks, %.1f MiB streamed per pass at %.2f GB/s\n",
		r.ResidentUnits, r.StreamedUnits, r.TransferBlocks, float64(r.StreamedBytes)/(1<<20), r.H2DGBps)
	if r.HostUnits > 0 {
		var host float64
		for _, t := range r.Traps {
			host += t.MedianHostMs()
		}
		fmt.Fprintf(&b, "%d units computed on the host: %.3f ms per pass (medians summed)\n", r.HostUnits, host)
		if r.PredictedHostMs > 0 {
			dram := "host DRAM reads not modelled"
			if r.HostReadGBps > 0 {
				dram = fmt.Sprintf("host DRAM reads %.1f GB/s shared with the copies", r.HostReadGBps)
			}
			fmt.Fprintf(&b, "  predicted %.3f ms beside the copies, %.3f ms alone (%s)\n", r.PredictedHostMs, r.PredictedHostSolo, dram)
		}
	}
	if r.PlanTokens > 0 {
		fmt.Fprintf(&b, "plan made for %d tokens per forward\n", r.PlanTokens)
	}
	if r.DroppedPasses > 0 {
		fmt.Fprintf(&b, "%d earlier passes left out: measured under a placement the engine has since replaced\n", r.DroppedPasses)
	}
	r.announcedTable(&b)
	return b.String()
}

// announcedGroups fills the report's announced-unit rows from the passes.
func (r *OffloadTimingReport) announcedGroups(e *engine, snaps []OffloadTimingSnapshot) {
	r.PoolSlots, r.PoolSlotBytes = e.plan.PoolSlots, e.plan.PoolSlotBytes
	r.ExpectedMissRate, r.ExpectedPoolBytes = e.plan.ExpectedMissRate, e.plan.ExpectedPoolBytes
	idx := map[string]int{}
	for _, u := range e.units {
		if !u.announced {
			continue
		}
		g := groupName(u.name)
		i, ok := idx[g]
		if !ok {
			i = len(r.Announced)
			idx[g] = i
			r.Announced = append(r.Announced, AnnouncedGroupStats{Group: g, Passes: len(snaps)})
		}
		r.Announced[i].Units++
		if u.resident {
			r.Announced[i].Resident++
		}
	}
	// Each group's expected miss rate: the plan's expected copies over its
	// streamed units' profiled calls.
	if len(e.planIn.Units) == len(e.units) && len(e.plan.Resident) == len(e.units) {
		copies := expectedCopies(e.planIn, e.plan)
		exp, calls := make([]float64, len(r.Announced)), make([]float64, len(r.Announced))
		for _, u := range e.units {
			if u.announced && !u.resident {
				gi := idx[groupName(u.name)]
				exp[gi] += copies[u.idx]
				calls[gi] += e.planIn.Units[u.idx].Calls
			}
		}
		for gi := range r.Announced {
			if calls[gi] > 0 {
				r.Announced[gi].ExpectedMissRate = exp[gi] / calls[gi]
			}
		}
	}
	if len(r.Announced) == 0 {
		return
	}
	tokens := 0
	for _, s := range snaps {
		tokens += s.Tokens
		if s.Tokens == 0 {
			tokens = -1 << 40 // unknown for one pass: unknown
		}
		r.Pool.add(s.Pool)
		for _, rec := range s.Records {
			if !rec.Announced {
				continue
			}
			g := &r.Announced[idx[groupName(rec.Trap)]]
			g.Calls++
			if rec.Hit {
				g.Hits++
			}
			if rec.Streamed {
				g.StreamedCalls++
				if rec.Hit {
					g.StreamedHits++
				}
			}
			g.CopiedBytes += rec.Bytes
			g.TransferMs += rec.TransferMs
			g.ComputeMs += rec.ComputeMs
			g.WaitMs += rec.WaitMs
		}
	}
	for i := range r.Announced {
		r.Announced[i].Tokens = max(tokens, 0)
	}
	r.StreamedBytes += r.Pool.CopiedBytes / int64(max(len(snaps), 1))
}

// groupRows renders a table row per group of announced units: the per-pass
// sums of MiB copied, transfer, compute and wait.
func (r *OffloadTimingReport) groupRows(b *strings.Builder) {
	for _, g := range r.Announced {
		n := float64(max(g.Passes, 1))
		fmt.Fprintf(b, tableRow, g.Group, "pool", float64(g.CopiedBytes)/n/(1<<20), g.TransferMs/n, g.ComputeMs/n, g.WaitMs/n, 0.0)
	}
}

// announcedTable renders each group's calls, hit rate (predicted and
// measured) and bytes, and the pool's totals.
func (r *OffloadTimingReport) announcedTable(b *strings.Builder) {
	for _, g := range r.Announced {
		fmt.Fprintf(b, "announced %s: %d units (%d resident), %.1f calls per pass, hit rate %.1f%%; streamed calls miss %.1f%% (predicted %.1f%%); %.2f MiB streamed per pass",
			g.Group, g.Units, g.Resident, float64(g.Calls)/float64(max(g.Passes, 1)), 100*g.HitRate(), 100*g.StreamedMissRate(), 100*g.ExpectedMissRate, g.BytesPerPass()/(1<<20))
		if g.Tokens > 0 {
			fmt.Fprintf(b, ", %.2f MiB per token", g.BytesPerToken()/(1<<20))
		}
		b.WriteString("\n")
	}
	if len(r.Announced) > 0 {
		fmt.Fprintf(b, "expert cache: %d pool slots of %.2f MiB; %.2f MiB copied per pass (predicted %.2f MiB), %d copies of units announced and not run\n",
			r.PoolSlots, float64(r.PoolSlotBytes)/(1<<20), float64(r.Pool.CopiedBytes)/float64(max(r.Pool.Passes, 1))/(1<<20),
			r.ExpectedPoolBytes/(1<<20), r.Pool.Copies-r.Pool.Misses)
	}
}

func (s OffloadTimingSnapshot) timingTable() string {
	var b strings.Builder
	fmt.Fprintf(&b, tableHead, "unit", "place", "MiB", "transfer ms", "compute ms", "wait ms", "host ms")
	for _, r := range s.Records {
		fmt.Fprintf(&b, tableRow, r.Trap, placeOf(r.Streamed, r.Host), float64(r.Bytes)/(1<<20), r.TransferMs, r.ComputeMs, r.WaitMs, r.HostMs)
	}
	fmt.Fprintf(&b, "pass %d totals: transfer %.3f ms, compute %.3f ms, wait %.3f ms; forward %.3f ms, plan predicted %.3f ms\n",
		s.Pass, s.TotalTransferMs(), s.TotalComputeMs(), s.TotalWaitMs(), s.ForwardMs, s.PredictedMs)
	return b.String()
}

// runSeconds is each unit's compute per call over the measured runs of a
// pass (the mean of its runs: an announced unit may run several times).
func runSeconds(runs []unitRun) (map[*unit]float64, error) {
	sum, n := map[*unit]float64{}, map[*unit]int{}
	for _, r := range runs {
		sec, ok, err := r.elapsed()
		if err != nil {
			return nil, err
		}
		if ok {
			sum[r.u] += sec
			n[r.u]++
		}
	}
	for u := range sum {
		sum[u] /= float64(n[u])
	}
	return sum, nil
}
