package host

import (
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestPoolCovers: every Run covers [0,n) exactly once whatever the chunk,
// the thread count and whether the helpers spin or park between Runs
// (spin 0: they park at once; a pause between Runs outlasts a short spin),
// with Runs issued from several goroutines at once.
func TestPoolCovers(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 5} {
		for _, spin := range []time.Duration{0, 20 * time.Microsecond, SpinWait} {
			p := newPool(threads, spin)
			var wg sync.WaitGroup
			for g := range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for it := range 60 {
						n := 1 + (it*37+g*11)%300
						chunk := 1 + it%7
						hits := make([]atomic.Int32, n)
						var bad atomic.Int32
						p.Run(n, chunk, func(worker, lo, hi int) {
							if worker < 0 || worker >= threads || lo < 0 || hi > n || lo >= hi {
								bad.Add(1)
								return
							}
							p.Scratch(worker, 16)[0] = float32(lo)
							for i := lo; i < hi; i++ {
								hits[i].Add(1)
							}
						})
						if bad.Load() != 0 {
							t.Errorf("threads %d: a chunk out of range or a bad worker index", threads)
							return
						}
						for i := range hits {
							if h := hits[i].Load(); h != 1 {
								t.Errorf("threads %d spin %v: item %d of %d covered %d times", threads, spin, i, n, h)
								return
							}
						}
						if it%20 == 0 {
							time.Sleep(50 * time.Microsecond)
						}
					}
				}()
			}
			wg.Wait()
			p.Close()
			p.Close()
			ran := 0
			p.Run(10, 1, func(_, lo, hi int) { ran += hi - lo })
			if ran != 10 {
				t.Fatalf("Run after Close covered %d of 10", ran)
			}
		}
	}
}

// TestPoolClosedAtOnce: a pool closed right after NewPool, before its
// helper goroutines have first run, still stops them all (they once took
// Close's quit job for the job they had already seen and waited forever).
func TestPoolClosedAtOnce(t *testing.T) {
	before := runtime.NumGoroutine()
	for i := 0; i < 50; i++ {
		NewPool(4).Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after 50 pools of 4 threads were made and closed, %d before", n, before)
	}
}

// BenchmarkPoolRun is the cost of one Run of trivial work on all threads:
// the hand-off a decode step pays per pool job.
func BenchmarkPoolRun(b *testing.B) {
	p := NewPool(0)
	defer p.Close()
	var sink atomic.Int64
	fn := func(_, lo, hi int) { sink.Add(int64(hi - lo)) }
	b.ReportAllocs()
	for b.Loop() {
		p.Run(64, 1, fn)
	}
}

// TestEngineKnobs: the spin and chunk knobs reach the pool and the GEMV
// split, from Options or the environment, and bad values are errors naming
// the variable.
func TestEngineKnobs(t *testing.T) {
	e, err := NewEngine(Options{Threads: 2, SpinWait: -1, MaxChunkKiB: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.pool.spin != 0 || e.maxChunk != 0 {
		t.Errorf("SpinWait -1, MaxChunkKiB -1: spin %v, chunk cap %d; want 0 and none", e.pool.spin, e.maxChunk)
	}
	// LM head: 32064 quads of 32 KiB; uncapped, four chunks per thread.
	nq, bytes := 32064, 128256*4096*2
	if got := e.gemvChunk(nq, bytes); got != 4008 {
		t.Errorf("uncapped chunk %d quads, want 4008", got)
	}
	t.Setenv("FT_HOST_SPIN", "7us")
	t.Setenv("FT_HOST_CHUNK_KIB", "128")
	e2, err := NewEngine(Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close()
	if e2.pool.spin != 7*time.Microsecond || e2.maxChunk != 128<<10 {
		t.Errorf("FT_HOST_SPIN=7us FT_HOST_CHUNK_KIB=128: spin %v, cap %d", e2.pool.spin, e2.maxChunk)
	}
	if got := e2.gemvChunk(nq, bytes); got != 4 {
		t.Errorf("128 KiB cap: chunk %d quads, want 4", got)
	}
	for _, bad := range [][2]string{{"FT_HOST_SPIN", "fast"}, {"FT_HOST_SPIN", "-1ms"}, {"FT_HOST_CHUNK_KIB", "lots"}} {
		t.Setenv("FT_HOST_SPIN", "")
		t.Setenv("FT_HOST_CHUNK_KIB", "")
		t.Setenv(bad[0], bad[1])
		if e, err := NewEngine(Options{Threads: 1}); err == nil {
			e.Close()
			t.Errorf("%s=%s: no error", bad[0], bad[1])
		} else if !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%s=%s: error %q does not name the variable", bad[0], bad[1], err)
		}
	}
}

// TestRunPhases: each phase covers [0,N) exactly once, its After runs once
// after all of the phase's chunks and before any chunk of the next phase
// (a phase reads what the previous After wrote), empty phases' After run
// in order, whatever the thread count and spin.
func TestRunPhases(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 5} {
		for _, spin := range []time.Duration{0, SpinWait} {
			p := newPool(threads, spin)
			for it := range 40 {
				ns := []int{1 + it%9, 0, 37 + it, 0, 300, 1}
				hits := make([][]atomic.Int32, len(ns))
				var order []int // After calls, in order
				var stage atomic.Int32
				var bad atomic.Int32
				phases := make([]Phase, len(ns))
				for i, n := range ns {
					hits[i] = make([]atomic.Int32, n)
					phases[i] = Phase{N: n, Chunk: 1 + (it+i)%5, Fn: func(worker, lo, hi int) {
						if worker < 0 || worker >= threads || stage.Load() != int32(i) {
							bad.Add(1)
						}
						for j := lo; j < hi; j++ {
							hits[i][j].Add(1)
						}
					}, After: func() {
						for j := range hits[i] {
							if hits[i][j].Load() != 1 {
								bad.Add(1)
							}
						}
						order = append(order, i)
						stage.Store(int32(i + 1))
					}}
				}
				p.RunPhases(phases)
				if bad.Load() != 0 {
					t.Fatalf("threads %d spin %v: a chunk ran outside its phase, with a bad worker, or an After ran early", threads, spin)
				}
				if len(order) != len(ns) {
					t.Fatalf("threads %d: After order %v, want every phase once", threads, order)
				}
				for i, o := range order {
					if o != i {
						t.Fatalf("threads %d: After order %v", threads, order)
					}
				}
				// A plain Run after a phased job still works.
				var sum atomic.Int64
				p.Run(100, 7, func(_, lo, hi int) { sum.Add(int64(hi - lo)) })
				if sum.Load() != 100 {
					t.Fatalf("Run after RunPhases covered %d of 100", sum.Load())
				}
			}
			p.Close()
		}
	}
}
