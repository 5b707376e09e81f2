package main

import (
	"fmt"
	"io"
	"os"
	runtimemetrics "runtime/metrics"
	"slices"
	"time"

	"github.com/flextensor-go/flextensor/offload"
)

// FT_TOKEN_TRACE=1 prints one line a token for run-model (and one a timed
// forward for bench): the time since the previous token split into the
// forward's call, the token's pick (on a GPU: the wait for the forward's
// tail and the readback) and what ran outside both (the caller's own work
// between tokens), the GC cycles in between, and for an offloaded model
// what the engine did with the pass (offload.PassInfo: its phase, the plan
// in force, what it measured, whether the placement changed after it). At
// the end a summary sets the steady passes' median apart from the others,
// so that a run-model rate can be compared with bench's steady forwards. A
// step is steady when it is timed (not bench's context prefill or warm-up
// forwards, not run-model's prompt forward) and every offload manager's
// last pass was steady; untimed lines end in "; untimed".
// Off by default: "" or "0" off, "1" on, anything else an error naming the
// variable.

// tokenTraceOn reads FT_TOKEN_TRACE.
func tokenTraceOn() (bool, error) {
	switch v := os.Getenv("FT_TOKEN_TRACE"); v {
	case "", "0":
		return false, nil
	case "1":
		return true, nil
	default:
		return false, usagef("FT_TOKEN_TRACE=%q: want 0 (off, the default) or 1 (a line a token)", v)
	}
}

// tokenTracer accumulates and prints the per-token lines.
type tokenTracer struct {
	w     io.Writer
	what  string                    // "token" or "forward"
	pass  []func() offload.PassInfo // one a manager; none: not offloaded
	last  time.Time                 // the end of the previous step (zero before the first)
	gc    uint64
	gcBuf []runtimemetrics.Sample
	n     int
	// Steady and other steps' intervals, forwards and picks (ms).
	steady, other [3][]float64
}

// newTokenTracer starts a tracer writing to w; pass holds, for each offload
// manager the forward runs through, a function reporting its last pass.
func newTokenTracer(w io.Writer, what string, pass ...func() offload.PassInfo) *tokenTracer {
	t := &tokenTracer{w: w, what: what, pass: pass,
		gcBuf: []runtimemetrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}}
	t.gc = t.gcCycles()
	return t
}

// gcCycles reads the GC cycles completed so far (no stop of the world).
func (t *tokenTracer) gcCycles() uint64 {
	runtimemetrics.Read(t.gcBuf)
	if t.gcBuf[0].Value.Kind() != runtimemetrics.KindUint64 {
		return 0
	}
	return t.gcBuf[0].Value.Uint64()
}

// start marks the time the first step begins (its interval is counted from
// there).
func (t *tokenTracer) start() { t.last = time.Now() }

// step records one step that just ended: its forward and pick times, and
// whether the caller times it (only timed steps can be steady).
func (t *tokenTracer) step(forward, pick time.Duration, timed bool) {
	now := time.Now()
	t.n++
	interval := forward + pick
	if !t.last.IsZero() {
		interval = now.Sub(t.last)
	}
	t.last = now
	outside := max(interval-forward-pick, 0)
	gc := t.gcCycles()
	dgc := gc - t.gc
	t.gc = gc
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
	line := fmt.Sprintf("token-trace: %s %d: %.2f ms = forward %.2f + pick %.2f + outside %.2f; GC cycles +%d",
		t.what, t.n, ms(interval), ms(forward), ms(pick), ms(outside), dgc)
	steady := timed
	for _, pass := range t.pass {
		p := pass()
		line += "; " + p.String()
		steady = steady && p.Steady()
	}
	if !timed {
		line += "; untimed"
	}
	fmt.Fprintln(t.w, line)
	acc := &t.other
	if steady {
		acc = &t.steady
	}
	acc[0] = append(acc[0], ms(interval))
	acc[1] = append(acc[1], ms(forward))
	acc[2] = append(acc[2], ms(pick))
}

// summary prints the steady and other steps' medians.
func (t *tokenTracer) summary() {
	part := func(name string, a [3][]float64) string {
		if len(a[0]) == 0 {
			return fmt.Sprintf("%s: none", name)
		}
		return fmt.Sprintf("%s: %d, median %.2f ms (forward %.2f, pick %.2f; min %.2f, max %.2f)", name, len(a[0]),
			medianOf(a[0]), medianOf(a[1]), medianOf(a[2]), slices.Min(a[0]), slices.Max(a[0]))
	}
	fmt.Fprintf(t.w, "token-trace: %ss %s; %s\n", t.what, part("steady", t.steady), part("others", t.other))
}
