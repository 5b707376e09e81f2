package offload

import (
	"fmt"
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
}

// OffloadTimingSnapshot is one measured forward pass.
type OffloadTimingSnapshot struct {
	Pass        int
	ForwardMs   float64 // root entry to root exit on the compute stream
	PredictedMs float64 // the plan's prediction for one forward
	Records     []TrapTimingRecord
}

// TrapTimingStats aggregates one trap over the window's passes.
type TrapTimingStats struct {
	Trap     string
	Streamed bool
	Passes   int
	Bytes    int64 // the unit's weight bytes (0 for a manual block)
	// Per-pass samples, in pass order.
	TransferMs, ComputeMs, WaitMs []float64
}

// MedianTransferMs, MedianComputeMs and MedianWaitMs summarise the samples.
func (s TrapTimingStats) MedianTransferMs() float64 { return median(s.TransferMs) }

// MedianComputeMs is the median compute time.
func (s TrapTimingStats) MedianComputeMs() float64 { return median(s.ComputeMs) }

// MedianWaitMs is the median stall.
func (s TrapTimingStats) MedianWaitMs() float64 { return median(s.WaitMs) }

// ComputeBudgetMs is the compute time the planner should assume for this
// trap: the median, or with conservative the largest sample. Transfers and
// waits are not part of it (a wait is an outcome of a plan, not a cost).
func (s TrapTimingStats) ComputeBudgetMs(conservative bool) float64 {
	if len(s.ComputeMs) == 0 {
		return 0
	}
	if conservative {
		return slices.Max(s.ComputeMs)
	}
	return median(s.ComputeMs)
}

// OffloadTimingReport is the timing of a window of INFERENCE passes.
type OffloadTimingReport struct {
	Snapshots      []OffloadTimingSnapshot
	Traps          []TrapTimingStats // in execution order
	ForwardMs      float64           // median measured forward
	PredictedMs    float64           // the plan's prediction
	FloorMs        float64           // max(compute, streamed bytes over the measured curve)
	H2DGBps        float64           // achieved copy bandwidth: bytes copied / copy time
	StreamedBytes  int64             // bytes copied per pass
	ResidentUnits  int
	StreamedUnits  int
	TransferBlocks int
}

// ComputeBudgetsByProfileLabel maps each trap's name to its compute budget
// (median, or largest sample with conservative).
func (r *OffloadTimingReport) ComputeBudgetsByProfileLabel(conservative bool) map[string]float64 {
	out := map[string]float64{}
	for _, t := range r.Traps {
		out[t.Trap] = t.ComputeBudgetMs(conservative)
	}
	return out
}

// timingState collects passes between ResetOffloadTiming calls.
type timingState struct {
	pass      int
	rootStart runtime.Event
	current   []*unit
	blocks    []blockRun
	snaps     []OffloadTimingSnapshot
}

func (t *timingState) begin(e *engine) error {
	ev, err := e.dev.Compute().Record()
	if err != nil {
		return err
	}
	t.rootStart = ev
	t.current = t.current[:0]
	return nil
}

func (t *timingState) unitDone(u *unit) { t.current = append(t.current, u) }

func (t *timingState) abort() { t.current, t.blocks, t.rootStart = t.current[:0], t.blocks[:0], nil }

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
	if err := e.copy.Synchronize(); err != nil {
		return err
	}
	snap := OffloadTimingSnapshot{Pass: t.pass, PredictedMs: e.plan.PredictedSec * 1e3}
	if t.rootStart != nil {
		d, err := endEv.ElapsedSince(t.rootStart)
		if err != nil {
			return err
		}
		snap.ForwardMs = ms(d.Seconds())
	}
	for _, u := range t.current {
		r := TrapTimingRecord{Trap: u.name, Streamed: !u.resident}
		if u.start != nil && u.end != nil {
			d, err := u.end.ElapsedSince(u.start)
			if err != nil {
				return err
			}
			r.ComputeMs = ms(d.Seconds())
		}
		if u.waitStart != nil && u.start != nil {
			d, err := u.start.ElapsedSince(u.waitStart)
			if err != nil {
				return err
			}
			r.WaitMs = ms(max(d.Seconds(), 0))
		}
		if u.copyRec != nil {
			d, err := u.copyRec.end.ElapsedSince(u.copyRec.start)
			if err != nil {
				return err
			}
			r.TransferMs, r.Bytes = ms(d.Seconds()), u.copyRec.bytes
		}
		u.start, u.end, u.waitStart, u.copyRec = nil, nil, nil, nil
		snap.Records = append(snap.Records, r)
	}
	for _, br := range t.blocks {
		d, err := br.end.ElapsedSince(br.start)
		if err != nil {
			return err
		}
		snap.Records = append(snap.Records, TrapTimingRecord{Trap: br.name, ComputeMs: ms(d.Seconds())})
	}
	t.blocks = t.blocks[:0]
	t.snaps = append(t.snaps, snap)
	t.pass++
	t.current, t.rootStart = t.current[:0], nil
	return nil
}

func ms(sec float64) float64 { return sec * 1e3 }

// report aggregates the window.
func (t *timingState) report(e *engine) *OffloadTimingReport {
	if len(t.snaps) == 0 {
		return nil
	}
	r := &OffloadTimingReport{Snapshots: slices.Clone(t.snaps), PredictedMs: e.plan.PredictedSec * 1e3,
		FloorMs: e.plan.FloorSec * 1e3, TransferBlocks: e.plan.Slots}
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
				r.Traps = append(r.Traps, TrapTimingStats{Trap: rec.Trap, Streamed: rec.Streamed, Bytes: unitBytes[rec.Trap]})
			}
			st := &r.Traps[i]
			st.Passes++
			st.TransferMs = append(st.TransferMs, rec.TransferMs)
			st.ComputeMs = append(st.ComputeMs, rec.ComputeMs)
			st.WaitMs = append(st.WaitMs, rec.WaitMs)
			copied += rec.Bytes
			copySec += rec.TransferMs / 1e3
		}
	}
	r.ForwardMs = median(fwd)
	if copySec > 0 {
		r.H2DGBps = float64(copied) / copySec / 1e9
	}
	for _, u := range e.units {
		if u.resident {
			r.ResidentUnits++
		} else {
			r.StreamedUnits++
			r.StreamedBytes += u.bytes
		}
	}
	return r
}

// CollectOffloadTiming returns the timing of the passes since the last reset
// (nil when timing is off or no pass was measured).
func (m *Manager) CollectOffloadTiming() (*OffloadTimingReport, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.e == nil {
		return nil, fmt.Errorf("offload manager %q: CollectOffloadTiming: %w", m.name, ErrNotOffloaded)
	}
	if m.e.cfg.OffloadTiming == TimingOff {
		return nil, nil
	}
	return m.e.timing.report(m.e), nil
}

// ResetOffloadTiming starts a fresh window.
func (m *Manager) ResetOffloadTiming() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.e != nil {
		m.e.timing.snaps = nil
	}
}

// UpdateOffloadTiming publishes a measured pass that is still in flight:
// in graph mode, a replay of a whole-forward graph runs no traps, so the
// caller publishes after each replay it wants to keep. Forwards whose traps
// ran (eager, or per-unit graphs replayed inside the traps) publish
// themselves, and then this has nothing to do. It reports false when
// finishing the pass failed.
func (m *Manager) UpdateOffloadTiming(replayGeneration int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.e == nil || m.e.cfg.OffloadTiming != TimingGraph || m.e.phase != PhaseInference {
		return true
	}
	if len(m.e.timing.current) == 0 && m.e.timing.rootStart == nil {
		return true
	}
	return m.e.timing.end(m.e) == nil
}

// FormatOffloadTimingTable renders a report: one row per trap with median
// transfer, compute and wait, then the forward, its prediction and floor,
// and the achieved copy bandwidth.
func FormatOffloadTimingTable(r *OffloadTimingReport) string {
	if r == nil {
		return "offload timing: no measured passes (is OffloadTiming off?)\n"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-28s %-8s %10s %12s %11s %9s\n", "unit", "place", "MiB", "transfer ms", "compute ms", "wait ms")
	for _, t := range r.Traps {
		place := "resident"
		if t.Streamed {
			place = "streamed"
		}
		fmt.Fprintf(&b, "%-28s %-8s %10.1f %12.3f %11.3f %9.3f\n", t.Trap, place, float64(t.Bytes)/(1<<20),
			t.MedianTransferMs(), t.MedianComputeMs(), t.MedianWaitMs())
	}
	fmt.Fprintf(&b, "forward %.3f ms (median of %d passes); plan predicted %.3f ms, floor %.3f ms\n",
		r.ForwardMs, len(r.Snapshots), r.PredictedMs, r.FloorMs)
	fmt.Fprintf(&b, "%d resident / %d streamed units, %d transfer blocks, %.1f MiB streamed per pass at %.2f GB/s\n",
		r.ResidentUnits, r.StreamedUnits, r.TransferBlocks, float64(r.StreamedBytes)/(1<<20), r.H2DGBps)
	return b.String()
}
