package offload

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/hostmem"
)

// Moving host units to fast memory (FT_HOST_BLOCK_REALLOC=N; off by
// default: measured in s12c with no gain, since the planner already puts
// host units on the fastest blocks). When a plan in force computes a unit on
// the host whose block reads slowly (below hostBlockFastFrac of the
// fastest rated block), the engine allocates fresh blocks for it and rates
// each: the first fast one gets the unit's bytes and replaces its block.
// Slow fresh blocks are held until the end, so the allocator cannot hand
// the same memory back, and the replaced blocks are freed then too. N
// bounds the fresh blocks tried per plan put in force (each ~416 MiB of
// pinned memory for a Llama-3-8B layer, held until the round ends); the
// slowest host units go first. An allocation that fails ends the round
// (traced, not an error: the plan runs on the blocks it has).

// hostBlockRealloc parses FT_HOST_BLOCK_REALLOC: unset or 0 off, N the
// fresh blocks to try per plan.
func hostBlockRealloc() (int, error) {
	v := os.Getenv("FT_HOST_BLOCK_REALLOC")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("offload: FT_HOST_BLOCK_REALLOC=%q: want the number of fresh host blocks to try (0: off)", v)
	}
	return n, nil
}

// traceReallocIdle says under a Trace why FT_HOST_BLOCK_REALLOC, when set,
// will do nothing: block rates are off, there is no host backend, or the
// host backend cannot rate blocks.
func (e *engine) traceReallocIdle() {
	if e.reallocTries <= 0 || e.blockRater() != nil {
		return
	}
	why := "the host backend cannot rate host blocks"
	switch {
	case !e.rateBlocksOn:
		why = "host block rates are off (FT_HOST_BLOCK_RATES=0)"
	case e.cfg.HostBackend == nil:
		why = "there is no host backend (Config.HostBackend; infer: --host-threads N)"
	}
	e.trace(fmt.Sprintf("host block realloc: FT_HOST_BLOCK_REALLOC=%d does nothing: %s", e.reallocTries, why), 0)
}

// reallocSlowHost gives the plan's host units on slow blocks fast ones
// where fresh allocations find them (see above). It runs once the units'
// placements are recorded (allocSlots), outside any pass.
func (e *engine) reallocSlowHost() error {
	r := e.blockRater()
	if e.reallocTries <= 0 || r == nil {
		return nil
	}
	ref := e.maxBlockRate()
	thr := hostBlockFastFrac * ref
	var slow []*unit
	for _, u := range e.units {
		if u.onHost && u.host != nil && u.hostRate > 0 && u.hostRate < thr {
			slow = append(slow, u)
		}
	}
	if len(slow) == 0 {
		return nil
	}
	slices.SortStableFunc(slow, func(a, b *unit) int {
		switch {
		case a.hostRate < b.hostRate:
			return -1
		case a.hostRate > b.hostRate:
			return 1
		}
		return 0
	})
	t0 := time.Now()
	var held []*runtime.HostBuffer
	defer func() {
		for _, h := range held {
			h.Free()
		}
	}()
	tries, moved := 0, 0
	var note, rates string
	var heldBytes int64
outer:
	for _, u := range slow {
		for tries < e.reallocTries {
			tries++
			h, err := e.st.hostBlock(max(u.bytes, 1), "offload unit "+u.name)
			if err != nil {
				note = fmt.Sprintf("; allocation failed, stopped: %v", err)
				break outer
			}
			// A page never written would read from the shared zero page,
			// far faster than memory: fault them all in before rating.
			hostmem.Touch(h.Bytes(), 0)
			bps, err := r.RateHostBlock(h.Bytes()[:u.bytes])
			if err != nil {
				h.Free()
				return fmt.Errorf("offload: rating a fresh host block for unit %s: %w", u.name, err)
			}
			if bps >= thr {
				parallelCopy(h.Bytes()[:u.bytes], u.host.Bytes()[:u.bytes])
				u.dropHostViews()
				held = append(held, u.host)
				heldBytes += u.host.Size()
				rates += fmt.Sprintf(" %d:%.1f->%.1f", u.idx, u.hostRate/1e9, bps/1e9)
				u.host, u.hostRate = h, bps
				moved++
				break
			}
			held = append(held, h)
			heldBytes += h.Size()
		}
	}
	if e.cfg.Trace != nil {
		e.cfg.Trace(fmt.Sprintf("host block realloc: %d of %d slow host units moved to fast blocks (unit:GB/s%s), %d fresh blocks tried, %.1f MiB held meanwhile%s",
			moved, len(slow), rates, tries, float64(heldBytes)/(1<<20), note), time.Since(t0))
	}
	return nil
}

// parallelCopy copies src into dst (same length) in eight pieces on as
// many goroutines.
func parallelCopy(dst, src []byte) {
	const parts = 8
	n := int64(len(src))
	_ = inPieces(n, max((n+parts-1)/parts, 1), parts, func(lo, hi int64) error {
		copy(dst[lo:hi], src[lo:hi])
		return nil
	})
}
