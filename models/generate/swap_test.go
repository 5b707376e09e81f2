package generate_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/models/generate"
	"github.com/flextensor-go/flextensor/runtime"
)

// swapRun runs g to the end and checks the shared expectations.
func swapRun(t *testing.T, g *preemptRig, want [][]int32) {
	t.Helper()
	for g.next(t) {
	}
	s := g.s
	if s.Preemptions() == 0 {
		t.Fatalf("no preemption in a cache of %d blocks", g.cache.TotalBlocks())
	}
	if s.Swaps() > s.Preemptions() {
		t.Errorf("%d swaps but %d preemptions: a swap is a preemption", s.Swaps(), s.Preemptions())
	}
	for i, h := range g.hs {
		res := h.Wait()
		if !slices.Equal(res.Generated, want[i]) || res.Finish != generate.FinishLength || res.Err != nil {
			t.Errorf("request %d: %v (%s, %v), alone %v", i, res.Generated, res.Finish, res.Err, want[i])
		}
		if !slices.Equal(g.streamed[i], res.Generated) {
			t.Errorf("request %d: streamed %v, result %v", i, g.streamed[i], res.Generated)
		}
	}
	if preempted(g.stepOf[0]) {
		t.Errorf("the oldest request was preempted: its tokens came at steps %v", g.stepOf[0])
	}
	if n := s.SwapUsedBlocks(); n != 0 {
		t.Errorf("after the run %d blocks are still swapped out", n)
	}
	g.allFree(t)
}

// TestSchedulerSwap: with a swap area, preempted decoding requests are
// swapped out to host memory and back instead of recomputed (Swaps > 0,
// counted among Preemptions), and every request still gives exactly its
// lone-run tokens, streamed once, on every family. A swap area below one
// block swaps nothing: every preemption recomputes, with the same tokens
// (on the first family).
func TestSchedulerSwap(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(fx.family, func(t *testing.T) {
			m, b := load(t, fx.dir)
			reqs := preemptRequests(m.Cfg.VocabSize)
			want := make([][]int32, len(reqs))
			for i, r := range reqs {
				want[i] = alone(t, m, b, r)
			}
			block := m.PagedConfig(1, 4).BlockBytes(b.ActDType())
			on := newPreemptRigSwap(t, m, b, reqs, 1<<20)
			swapRun(t, on, want)
			if on.s.Swaps() == 0 {
				t.Errorf("swap on: %d preemptions, no swap", on.s.Preemptions())
			}
			t.Logf("swap on: %d preemptions, %d swaps", on.s.Preemptions(), on.s.Swaps())
			if fx.family != fixtures[0].family {
				return // the recompute path is every family's TestSchedulerPreemption
			}
			small := newPreemptRigSwap(t, m, b, reqs, block-1)
			swapRun(t, small, want)
			if small.s.Swaps() != 0 {
				t.Errorf("a swap area below one block (%d bytes) swapped %d times", block-1, small.s.Swaps())
			}
		})
	}
}

// TestSchedulerSwapFallback: a swap area of two blocks holds the first
// victim (when it has at most two blocks) but not all at once: the swaps
// it has no room for recompute, both counters show it, and the tokens are
// the lone runs'.
func TestSchedulerSwapFallback(t *testing.T) {
	m, b := load(t, fixtures[0].dir)
	reqs := preemptRequests(m.Cfg.VocabSize)
	want := make([][]int32, len(reqs))
	for i, r := range reqs {
		want[i] = alone(t, m, b, r)
	}
	block := m.PagedConfig(1, 4).BlockBytes(b.ActDType())
	for _, blocks := range []int64{2, 3, 4} {
		g := newPreemptRigSwap(t, m, b, reqs, blocks*block)
		swapRun(t, g, want)
		t.Logf("swap area of %d blocks: %d preemptions, %d swaps", blocks, g.s.Preemptions(), g.s.Swaps())
		if g.s.Swaps() > 0 && g.s.Swaps() < g.s.Preemptions() {
			return // a run with both
		}
	}
	t.Errorf("no swap area of 2 to 4 blocks both swapped and recomputed")
}

// TestSchedulerCancelSwapped: a request cancelled while it waits swapped
// out finishes "cancelled" with the tokens it had and frees its swapped
// blocks; the others finish as alone.
func TestSchedulerCancelSwapped(t *testing.T) {
	m, b := load(t, fixtures[0].dir)
	reqs := preemptRequests(m.Cfg.VocabSize)
	g := newPreemptRigSwap(t, m, b, reqs, 1<<20)
	s, hs, streamed := g.s, g.hs, g.streamed
	for s.Swaps() == 0 {
		if !g.next(t) {
			t.Fatalf("all requests finished after %d steps without a swap", g.step)
		}
	}
	if s.SwapUsedBlocks() == 0 || s.Waiting() != 1 {
		t.Fatalf("after the first swap: %d swapped blocks, %d waiting; want some, 1", s.SwapUsedBlocks(), s.Waiting())
	}
	last := len(reqs) - 1
	had := slices.Clone(streamed[last])
	hs[last].Cancel()
	if err := s.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := hs[last].Wait(); r.Finish != generate.FinishCancelled || !slices.Equal(r.Generated, had) || !slices.Equal(streamed[last], had) {
		t.Errorf("the cancelled swapped request: %v (%s), streamed %v; it had %v", r.Generated, r.Finish, streamed[last], had)
	}
	for i := range last {
		if r, want := hs[i].Wait(), alone(t, m, b, reqs[i]); !slices.Equal(r.Generated, want) || r.Finish != generate.FinishLength {
			t.Errorf("request %d: %v (%s), alone %v", i, r.Generated, r.Finish, want)
		}
	}
	if s.SwapUsedBlocks() != 0 {
		t.Errorf("after the run %d blocks are still swapped out", s.SwapUsedBlocks())
	}
	g.allFree(t)
}

// TestSchedulerSwapBadOption: a negative SwapBytes is refused naming it.
func TestSchedulerSwapBadOption(t *testing.T) {
	m, b := load(t, fixtures[0].dir)
	cache, err := m.NewPagedCache(b, 4, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	if _, err := generate.New(m, b, cache, generate.Options{SwapBytes: -1}); err == nil || !strings.Contains(err.Error(), "SwapBytes:-1") {
		t.Errorf("negative SwapBytes: %v", err)
	}
}

// TestSchedulerSwapFailure: a swap-out that fails for another reason than a
// full swap area (here the host memory the area would take is over the
// device's host limit) is recomputed instead, with the lone runs' tokens;
// SwapFailures counts it and SwapErr says why (ErrOutOfMemory).
func TestSchedulerSwapFailure(t *testing.T) {
	m, b := load(t, fixtures[0].dir)
	reqs := preemptRequests(m.Cfg.VocabSize)
	want := make([][]int32, len(reqs))
	for i, r := range reqs {
		want[i] = alone(t, m, b, r)
	}
	dev, ok := b.Device().(*runtime.CPUDevice)
	if !ok {
		t.Fatalf("device %T, want the cpu device", b.Device())
	}
	dev.SetHostMemoryLimit(dev.HostMemory().InUse + 1) // no swap chunk fits
	defer dev.SetHostMemoryLimit(0)
	g := newPreemptRigSwap(t, m, b, reqs, 1<<20)
	swapRun(t, g, want)
	s := g.s
	if s.Swaps() != 0 || s.SwapFailures() != s.Preemptions() {
		t.Errorf("%d preemptions, %d swaps, %d swap failures; want every preemption a failed swap", s.Preemptions(), s.Swaps(), s.SwapFailures())
	}
	if err := s.SwapErr(); !errors.Is(err, runtime.ErrOutOfMemory) {
		t.Errorf("SwapErr: %v, want an error wrapping runtime.ErrOutOfMemory", err)
	}
}
