package host

import (
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
