package offload

import (
	"fmt"
	"math"
)

// Copies measured beside host units. The plan's copy times come from the
// H2D curve PROFILING measured with nothing else running (engine.go
// measureH2D). In a hybrid forward the copy engine reads the pinned blocks
// from the same DRAM the host cores read the host units' weights from, and
// the copies slow down too: on the H200 machine (bench-host --copy-device)
// copies alone ran at 55.2 GB/s, beside host reads at 40.4 GB/s. The
// shared-read model (planner_share.go) slows the host units but keeps the
// copies at the curve's time, so the measured replan predicted 8-11% less
// than the forwards took.
//
// So the passes that time the host units (host_measure.go) also time the
// streamed units' copies: the ring records an event on the copy stream just
// before each copy and one just after (ring.issue; the start event is
// recorded after the stream's wait for the slot's release, so waiting for
// a free slot is not counted, only the copy itself). Each copy consumed by
// a measured pass (after the warm-up) is one sample: its measured seconds
// over the curve's time for its bytes. The median of those ratios, clamped
// to [1, hostCopyScaleMax], scales every copy prediction of the bucket's
// plan inputs (PlanInput.TransferScale, on top of the configured
// TransferBudgetScale): both the kept/replaced decision of hostReplan and
// the prediction it reports use it, as does hostAloneTimes' conversion of
// the measured host times (the copies' read rate is what the host units
// shared DRAM with).
//
// Only ever slower than the profile: the curve was measured on an idle
// host, the copy engine's best case, and the sharing this corrects can only
// slow copies. A faster median means something the measurement does not
// explain (a block in faster pages than the profile's probe buffer, event
// resolution on small copies); keeping the curve then leaves the
// prediction as it was rather than making it optimistic. The upper clamp
// bounds what a broken sample (a copy timed across a stall) can do.
// Without samples (nothing streamed, or no copy finished inside a measured
// pass) the curve is left alone.
//
// Two limits. A copy issued at the end of one pass for the next (the ring
// prefetches across forwards) is a sample of the next pass, although part
// of it runs between forwards, beside no host unit: such samples pull the
// median toward the profiled rate, so the scale can understate the
// sharing. And the one scale measured for a bucket applies to every copy
// prediction of that bucket's plan inputs, including candidate plans with
// fewer host units than the measured one (which would share DRAM less);
// the bucket is not measured again after a replan, so a replaced plan is
// judged by the scale its predecessor's passes measured.
//
// FT_HOST_COPY_MEASURE=0 turns this off (A/B runs): the copies are not
// timed for it and the curve stands, as before. It is read when an engine
// is built (engine.copyMeasure); a value other than unset, "0" or "1"
// fails the build with an error naming the variable.

// hostCopyMeasureOn reads FT_HOST_COPY_MEASURE: unset or "1" on, "0" off,
// anything else an error.
func hostCopyMeasureOn() (bool, error) { return envSwitch("FT_HOST_COPY_MEASURE") }

// hostCopyScaleMax is the largest factor measured copies may put on the
// curve's copy times.
const hostCopyScaleMax = 4.0

// copySample is one copy timed in a measured pass.
type copySample struct {
	bytes int64
	sec   float64
}

// hostCopyScale is one bucket's measured copy correction.
type hostCopyScale struct {
	scale    float64 // factor on the curve's copy times (>= 1)
	measured float64 // median measured rate, bytes a second
	profiled float64 // the curve's rate for the same copies, bytes a second
	n        int     // samples
}

// copyScaleOf digests copy samples against curve c: the median of measured
// over predicted seconds, clamped to [1, hostCopyScaleMax], with the
// median measured and profiled rates. ok is false when no sample is usable
// (non-positive or non-finite time or bytes, or a curve that predicts no
// time); then the curve must stand.
func copyScaleOf(samples []copySample, c H2DCurve) (hostCopyScale, bool) {
	var ratios, meas, prof []float64
	if len(c.Points) == 0 {
		return hostCopyScale{}, false
	}
	for _, s := range samples {
		if s.bytes <= 0 || !(s.sec > 0) || math.IsInf(s.sec, 0) {
			continue
		}
		p := c.Time(s.bytes)
		if !(p > 0) || math.IsInf(p, 0) {
			continue
		}
		ratios = append(ratios, s.sec/p)
		meas = append(meas, float64(s.bytes)/s.sec)
		prof = append(prof, float64(s.bytes)/p)
	}
	if len(ratios) == 0 {
		return hostCopyScale{}, false
	}
	return hostCopyScale{scale: min(max(median(ratios), 1), hostCopyScaleMax),
		measured: median(meas), profiled: median(prof), n: len(ratios)}, true
}

// hostCopyBegin switches the ring's copy log on for a measured pass and
// off (dropping what it holds) for any other.
func (e *engine) hostCopyBegin() {
	if e.ring == nil {
		return
	}
	e.ring.logCopies = e.hm.on && e.copyMeasure
	if !e.ring.logCopies {
		e.ring.copyLog = nil // copies of an unmeasured pass are no samples
	}
}

// hostCopyCollect turns the logged copies the pass consumed into samples
// (keep: the pass is measured, not the warm-up); copies issued ahead for
// the next pass stay logged.
func (e *engine) hostCopyCollect(keep bool) error {
	r := e.ring
	if r == nil || len(r.copyLog) == 0 {
		return nil
	}
	rest := r.copyLog[:0]
	for _, lc := range r.copyLog {
		if lc.g >= r.entered {
			rest = append(rest, lc)
			continue
		}
		if !keep {
			continue
		}
		if err := lc.ct.end.Synchronize(); err != nil {
			return err
		}
		d, err := lc.ct.end.ElapsedSince(lc.ct.start)
		if err != nil {
			return err
		}
		e.hm.copies = append(e.hm.copies, copySample{bytes: lc.ct.bytes, sec: d.Seconds()})
	}
	clear(r.copyLog[len(rest):])
	r.copyLog = rest
	return nil
}

// hostCopyFinish ends the copy measurement of bucket key: the samples
// become the bucket's scale (when usable) and the ring's log stops.
func (e *engine) hostCopyFinish(key int) {
	h := &e.hm
	if e.ring != nil {
		e.ring.logCopies, e.ring.copyLog = false, nil
	}
	if h.copyByT == nil {
		h.copyByT = map[int]hostCopyScale{}
	}
	if e.copyMeasure {
		if cs, ok := copyScaleOf(h.copies, e.planIn.Curve); ok {
			h.copyByT[key] = cs
		}
	}
	h.copies = nil
}

// transferScale is the copy-time factor for a plan input at bucket tokens:
// the configured TransferBudgetScale times the bucket's measured copy scale
// (1 when none).
func (e *engine) transferScale(tokens int) float64 {
	base := e.cfg.TransferBudgetScale
	if base == 0 {
		base = 1
	}
	if cs, ok := e.hm.copyByT[tokens]; ok && cs.scale > 0 {
		return base * cs.scale
	}
	return base
}

// copyNote is the replan trace's account of the copies measured at bucket
// tokens ("" when the measurement is off).
func (e *engine) copyNote(tokens int) string {
	if !e.copyMeasure {
		return ""
	}
	cs, ok := e.hm.copyByT[tokens]
	if !ok {
		return "; no copy measured beside host units (the profiled curve stands)"
	}
	return fmt.Sprintf("; copies measured at %.1f GB/s beside host units (profiled %.1f; copy times x%.3f, %d copies)",
		cs.measured/1e9, cs.profiled/1e9, cs.scale, cs.n)
}
