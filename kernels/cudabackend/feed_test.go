//go:build cuda

package cudabackend

import (
	"errors"
	"math"
	"strings"
	"testing"
	"unsafe"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// feedRef is argmax_rows' rule on the host: the first index of the largest
// value; −1 for a NaN or +Inf anywhere, or only −Inf.
func feedRef(row []float32) int32 {
	best := int32(-1)
	for i, v := range row {
		if v != v || math.IsInf(float64(v), 1) {
			return -1
		}
		if !math.IsInf(float64(v), -1) && (best < 0 || v > row[best]) {
			best = int32(i)
		}
	}
	return best
}

// stepWords reads the step buffer's position and first token.
func stepWords(t *testing.T) (pos, tok int32) {
	t.Helper()
	var w [2]int32
	if err := gb.s.Download(unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), 8), gb.step.Ptr()); err != nil {
		t.Fatal(err)
	}
	return w[0], w[1]
}

// feedRows are test rows of width V: random, ties across and within
// blocks (the first wins), a NaN, a +Inf, all −Inf, −Inf among values,
// the maximum at the first and the last element.
func feedRows(t *testing.T, V int) [][]float32 {
	rng := newRNG(t)
	var rows [][]float32
	add := func(f func(x []float32)) {
		x := randBF16(rng, V, 10)
		f(x)
		rows = append(rows, x)
	}
	add(func([]float32) {})
	add(func(x []float32) { x[V-1], x[V/2], x[0] = 20, 20, 20 })
	add(func(x []float32) { x[min(3, V-1)], x[min(5, V-1)] = 20, 20 })
	add(func(x []float32) { x[V/3] = float32(math.NaN()) })
	add(func(x []float32) { x[V-1] = float32(math.Inf(1)) })
	add(func(x []float32) {
		for i := range x {
			x[i] = float32(math.Inf(-1))
		}
	})
	add(func(x []float32) { x[0], x[V-1] = float32(math.Inf(-1)), 30 })
	add(func(x []float32) { x[0] = 30 })
	return rows
}

// TestArgmaxFeed: argmax_feed's pick (read back through PostFed and
// FedToken) equals argmax_rows' and the host rule on rows of several
// widths (one block to the whole GPU's), in F32 and BF16, including ties,
// NaN, +Inf and all-−Inf rows; the step buffer then holds the position
// plus one and the pick (0 for −1). Every launch uses the same last-block
// counter, so a counter left non-zero would break the next row.
func TestArgmaxFeed(t *testing.T) {
	needGPU(t)
	pos := 7
	for _, V := range []int{1, 33, 1000, 4097, 128256} {
		for _, dt := range []runtime.DType{runtime.F32, runtime.BF16} {
			for r, row := range feedRows(t, V) {
				x := gpu(t, dt, row, 1, V)
				if err := gb.SetStep([]int32{123}, pos); err != nil {
					t.Fatal(err)
				}
				if err := gb.ArgmaxFeed(x); err != nil {
					t.Fatal(err)
				}
				ticket, err := gb.PostFed()
				if err != nil {
					t.Fatal(err)
				}
				got, err := gb.FedToken(ticket)
				if err != nil {
					t.Fatal(err)
				}
				var rows [1]int32
				if err := gb.ArgmaxRows(rows[:], x); err != nil {
					t.Fatal(err)
				}
				if want := feedRef(row); got != want || rows[0] != want {
					t.Errorf("V=%d %v row %d: argmax_feed %d, argmax_rows %d, want %d", V, dt, r, got, rows[0], want)
				}
				p, tok := stepWords(t)
				if p != int32(pos+1) || tok != max(got, 0) {
					t.Errorf("V=%d %v row %d: step buffer (position %d, token %d), want (%d, %d)", V, dt, r, p, tok, pos+1, max(got, 0))
				}
				if _, err := gb.FedToken(ticket); err == nil || !strings.Contains(err.Error(), "not posted") {
					t.Errorf("FedToken of a ticket read already: %v", err)
				}
				pos += 3
			}
		}
	}
}

// TestArgmaxFeedCaptured: a graph holding ArgmaxFeed replayed without
// SetStep advances the position by one a replay, and each replay's pick
// is read by its ticket, two replays in flight before the first read (the
// logits change between replays, so a stale ring slot or counter shows).
func TestArgmaxFeedCaptured(t *testing.T) {
	needGPU(t)
	const V = 128256
	rows := feedRows(t, V)
	x := gpu(t, runtime.F32, rows[0], 1, V)
	if err := gb.ensureFeed(); err != nil {
		t.Fatal(err)
	}
	g, err := gb.CaptureStep(func() error { return gb.ArgmaxFeed(x) })
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	const pos0 = 1000
	if err := gb.SetStep([]int32{1}, pos0); err != nil {
		t.Fatal(err)
	}
	// Each replay reads its own copy of a row (the uploads are ordered on
	// the stream, but x must not change under a replay in flight).
	xs := make([]*runtime.Tensor, len(rows))
	for i, row := range rows {
		xs[i] = gpu(t, runtime.F32, row, 1, V)
	}
	copyRow := func(i int) {
		if err := gb.s.CopyD2D(x.Buffer(), 0, xs[i].Buffer(), 0, int64(4*V)); err != nil {
			t.Fatal(err)
		}
	}
	tickets := make([]uint64, len(rows))
	for i := range rows {
		copyRow(i)
		if err := g.Replay(); err != nil {
			t.Fatal(err)
		}
		tk, err := gb.PostFed()
		if err != nil {
			t.Fatal(err)
		}
		tickets[i] = tk
		if i == 0 {
			continue
		}
		got, err := gb.FedToken(tickets[i-1]) // replay i is still in flight, perhaps
		if err != nil {
			t.Fatal(err)
		}
		if want := feedRef(rows[i-1]); got != want {
			t.Errorf("replay %d: pick %d, want %d", i-1, got, want)
		}
	}
	last := len(rows) - 1
	got, err := gb.FedToken(tickets[last])
	if err != nil {
		t.Fatal(err)
	}
	if want := feedRef(rows[last]); got != want {
		t.Errorf("replay %d: pick %d, want %d", last, got, want)
	}
	if p, tok := stepWords(t); p != int32(pos0+len(rows)) || tok != max(got, 0) {
		t.Errorf("after %d replays: step buffer (position %d, token %d), want (%d, %d)", len(rows), p, tok, pos0+len(rows), max(got, 0))
	}
}

// TestArgmaxFeedRingWrap: a posted pick survives more eager ArgmaxFeed
// launches than the ring has slots (another Generate running thousands of
// steps while this one's OnToken stalls): its slot is reused, but the pick
// was kept on the host first, so FedToken of the first ticket, read last,
// is still its row's pick, as is a ticket posted in the middle and the
// newest; a ticket read twice is an error that is not ErrFedLost.
func TestArgmaxFeedRingWrap(t *testing.T) {
	needGPU(t)
	const V = 1000
	rows := feedRows(t, V)
	first, later := rows[1], rows[2] // picks 0 and 3
	if feedRef(first) == feedRef(later) {
		t.Fatalf("test rows pick the same index %d", feedRef(first))
	}
	x0, x1 := gpu(t, runtime.F32, first, 1, V), gpu(t, runtime.F32, later, 1, V)
	if err := gb.SetStep([]int32{1}, 0); err != nil {
		t.Fatal(err)
	}
	if err := gb.ArgmaxFeed(x0); err != nil {
		t.Fatal(err)
	}
	t0, err := gb.PostFed()
	if err != nil {
		t.Fatal(err)
	}
	var mid uint64
	const n = feedRing + 37
	for i := range n {
		if err := gb.ArgmaxFeed(x1); err != nil {
			t.Fatalf("launch %d: %v", i, err)
		}
		if i == feedRing/2 {
			if mid, err = gb.PostFed(); err != nil {
				t.Fatal(err)
			}
		}
	}
	last, err := gb.PostFed()
	if err != nil {
		t.Fatal(err)
	}
	if last != t0+n || mid+feedRing <= last { // mid is within the ring of the newest
		t.Fatalf("tickets %d, %d, %d after %d launches", t0, mid, last, n)
	}
	if _, ok := gb.feed.read[t0]; !ok {
		t.Errorf("ticket %d (slot reused by ticket %d) was not kept on the host", t0, t0+feedRing)
	}
	for _, c := range []struct {
		ticket uint64
		want   int32
	}{{t0, feedRef(first)}, {mid, feedRef(later)}, {last, feedRef(later)}} {
		got, err := gb.FedToken(c.ticket)
		if err != nil {
			t.Fatalf("ticket %d: %v", c.ticket, err)
		}
		if got != c.want {
			t.Errorf("ticket %d (newest %d): pick %d, want %d", c.ticket, last, got, c.want)
		}
	}
	_, err = gb.FedToken(t0)
	if err == nil || errors.Is(err, kernels.ErrFedLost) || !strings.Contains(err.Error(), "not posted") {
		t.Errorf("FedToken of a ticket read already: %v", err)
	}
	if len(gb.feed.read) != 0 {
		t.Errorf("picks kept and never read: %v", gb.feed.read)
	}
}

// TestArgmaxFeedCaptureWithoutBuffers: ArgmaxFeed recorded by a capture
// with AsyncDecode off (CaptureStep then makes no feed buffers) is a clear
// error naming the missing buffers, not an allocation on the capturing
// stream; with AsyncDecode on, the same capture works.
func TestArgmaxFeedCaptureWithoutBuffers(t *testing.T) {
	needGPU(t)
	if err := gb.s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	saved := gb.AsyncDecode
	defer func() { gb.AsyncDecode = saved }()
	gb.feed.free() // no graph holding the old buffers is alive between tests
	x := gpu(t, runtime.F32, feedRows(t, 100)[0], 1, 100)
	gb.AsyncDecode = false
	g, err := gb.CaptureStep(func() error { return gb.ArgmaxFeed(x) })
	if err == nil {
		g.Close()
		t.Fatal("capture of ArgmaxFeed without the feed's buffers: no error")
	}
	if !strings.Contains(err.Error(), "without the feed's buffers") {
		t.Errorf("error %q does not name the missing buffers", err)
	}
	if gb.feed.scratch != nil || gb.feed.ring != nil {
		t.Errorf("the failed capture allocated the feed's buffers")
	}
	gb.AsyncDecode = true
	g, err = gb.CaptureStep(func() error { return gb.ArgmaxFeed(x) })
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
}
