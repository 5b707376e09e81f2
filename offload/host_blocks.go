package offload

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Host block rates. On the H200 machine (a KVM guest) host memory is
// unevenly fast by physical location: each 256 MiB chunk reads steadily at
// either ~125-145 GB/s or ~51-70 GB/s (bench/RESULTS.md, ninth session),
// and a host-computed unit reads its weights from its own pinned block. So
// which units go to the host matters: among identical decoder layers, the
// ones whose blocks landed on fast memory compute in about half the time.
//
// Before this, nothing saw it: PROFILING times units staged on the device;
// host time was first estimated for every unit from one GEMV figure (timed
// over one block: host.go measureHostBW), and only the units the first
// plan put on the host were then timed in INFERENCE (host_measure.go),
// which does reflect each chosen block's speed, but after the choice.
//
// So when the host backend can time a read of host memory on its threads
// (HostBlockRater; kernels/host's backend does, with the STREAM-like read
// `infer bench-host` reports), the engine rates every unit's block once
// after packing it (one parallel read pass a block, one block after
// another: ~3 ms a 416 MiB block on fast memory, ~7 on slow) and keeps the
// rate on the unit. A unit's host estimate is then its bytes over the GEMV
// figure times the fastest rated block's rate over its own block's rate
// (rateFactor): the planner, scoring every move, puts the units on fast
// blocks on the host first, and predicts each from its own block. The
// GEMV figure is timed over the fastest of the largest units' blocks, so
// the factor's reference is the memory the figure was taken on. Measured
// host times, once taken, replace the estimates as before (they contain
// the block's speed); units not measured keep their rated estimates,
// scaled by the measured/estimated ratio (host_measure.go).
//
// FT_HOST_BLOCK_RATES=0 turns it off (no rating, one figure for all units:
// the choice before), read when a model is offloaded.

// HostBlockRater is implemented by a host backend that can time a read of
// host memory: RateHostBlock reads data once on all the backend's threads
// and returns bytes a second, or 0 when the block is too small for its
// read rate to be the memory's (caches would serve it).
type HostBlockRater interface {
	RateHostBlock(data []byte) (float64, error)
}

// hostBlockFastFrac is the share of the fastest block's rate at or above
// which a block counts as fast in traces (the H200 guest's fast chunks
// read at 125-145 GB/s, its slow ones at 51-70).
const hostBlockFastFrac = 0.75

// hostBlockRatesOn reads FT_HOST_BLOCK_RATES: unset or "1" on, "0" off,
// anything else an error naming it.
func hostBlockRatesOn() (bool, error) { return envSwitch("FT_HOST_BLOCK_RATES") }

// blockRater is the host backend's rater when block rates are on (nil
// otherwise); set when the engine is built.
func (e *engine) blockRater() HostBlockRater {
	if !e.rateBlocksOn || e.cfg.HostBackend == nil {
		return nil
	}
	r, _ := e.cfg.HostBackend.(HostBlockRater)
	return r
}

// rateBlocks rates the host blocks of units just packed, one block after
// another (each read uses all the host backend's threads), and reports the
// rates under a Trace. Units without a block keep their rate. A rater's
// error or a rate that is not a finite number >= 0 is an error naming the
// unit.
func (e *engine) rateBlocks(units []*unit) error {
	r := e.blockRater()
	if r == nil || len(units) == 0 {
		return nil
	}
	t0 := time.Now()
	rated := 0
	for _, u := range units {
		if u.host == nil {
			continue
		}
		bps, err := r.RateHostBlock(u.host.Bytes()[:u.bytes])
		if err != nil {
			return fmt.Errorf("offload: rating unit %s's host block: %w", u.name, err)
		}
		if math.IsNaN(bps) || math.IsInf(bps, 0) || bps < 0 {
			return fmt.Errorf("offload: rating unit %s's host block: the host backend reports %v bytes/s; want a finite number >= 0", u.name, bps)
		}
		u.hostRate = bps
		rated++
	}
	if e.cfg.Trace != nil && rated > 0 {
		e.cfg.Trace(blockRatesLine(units), time.Since(t0))
	}
	return nil
}

// blockRatesLine summarises units' block rates: how many were rated, the
// min / median / max in GB/s and how many are fast (at least
// hostBlockFastFrac of the fastest).
func blockRatesLine(units []*unit) string {
	var rs []float64
	small := 0
	for _, u := range units {
		switch {
		case u.hostRate > 0:
			rs = append(rs, u.hostRate)
		case u.host != nil:
			small++
		}
	}
	line := fmt.Sprintf("host block rates: %d blocks rated", len(rs))
	if len(rs) > 0 {
		hi := slices.Max(rs)
		fast := 0
		for _, r := range rs {
			if r >= hostBlockFastFrac*hi {
				fast++
			}
		}
		line += fmt.Sprintf(", GB/s min %.1f / median %.1f / max %.1f, %d fast (>= %.0f%% of the max)",
			slices.Min(rs)/1e9, median(rs)/1e9, hi/1e9, fast, hostBlockFastFrac*100)
	}
	if small > 0 {
		line += fmt.Sprintf(", %d too small to rate", small)
	}
	return line
}

// maxBlockRate is the fastest rated block's rate over all units (0: none
// rated).
func (e *engine) maxBlockRate() float64 {
	var hi float64
	for _, u := range e.units {
		hi = max(hi, u.hostRate)
	}
	return hi
}

// rateFactor is the multiplier on unit u's host estimate: the fastest
// rated block's rate over u's block's (1 when u is not rated or rates are
// off). ref is maxBlockRate.
func (e *engine) rateFactor(u *unit, ref float64) float64 {
	if !e.rateBlocksOn || u.hostRate <= 0 || ref <= 0 {
		return 1
	}
	return ref / u.hostRate
}

// hostRatesTrace lists plan p's host units with their blocks' rates
// (unit index:GB/s, in unit order) and the fastest rated block left off
// the host, for tracePlanIn; "" when no host unit is rated.
func (e *engine) hostRatesTrace(p Plan) string {
	var b strings.Builder
	var off float64
	offIdx := -1
	for i, u := range e.units {
		if u.hostRate <= 0 {
			continue
		}
		if !p.IsHost(i) {
			if u.hostRate > off {
				off, offIdx = u.hostRate, i
			}
			continue
		}
		fmt.Fprintf(&b, " %d:%.1f", i, u.hostRate/1e9)
	}
	if b.Len() == 0 {
		return ""
	}
	s := ", host units' blocks (unit:GB/s)" + b.String()
	if offIdx >= 0 {
		s += fmt.Sprintf(", fastest block off the host %d:%.1f", offIdx, off/1e9)
	}
	return s
}

// HostBlockRates is the read rate (bytes a second) of each unit's host
// block as rated after packing, by unit name; units not rated (rates off,
// no rater, a block too small) are absent.
func (m *Manager) HostBlockRates() map[string]float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]float64{}
	if m.e == nil {
		return out
	}
	for _, u := range m.e.units {
		if u.hostRate > 0 {
			out[u.name] = u.hostRate
		}
	}
	return out
}
