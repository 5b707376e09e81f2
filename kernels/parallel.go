package kernels

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// The helper pool: GOMAXPROCS-1 goroutines, started on first use, that wait
// on an unbuffered channel. A caller hands a job only to helpers that are idle
// right now (a non-blocking send) and always works on the job itself, so a
// busy pool or a nested parallelFor degrades to inline execution instead of
// queueing or deadlocking.
var (
	poolOnce    sync.Once
	poolCh      chan *job
	poolHelpers int
)

// job is one parallelFor call: participants claim chunks of [0,n) from next.
type job struct {
	fn    func(worker, lo, hi int)
	n     int64
	chunk int64
	next  atomic.Int64
	ids   atomic.Int32 // helper ids handed out so far; the caller is worker 0
	wg    sync.WaitGroup
}

var jobPool = sync.Pool{New: func() any { return new(job) }}

func startPool() {
	poolHelpers = runtime.GOMAXPROCS(0) - 1
	poolCh = make(chan *job)
	for range poolHelpers {
		go func() {
			for j := range poolCh {
				j.run(int(j.ids.Add(1)))
				j.wg.Done()
			}
		}()
	}
}

func (j *job) run(worker int) {
	for {
		hi := j.next.Add(j.chunk)
		lo := hi - j.chunk
		if lo >= j.n {
			return
		}
		j.fn(worker, int(lo), int(min(hi, j.n)))
	}
}

// workers is the most goroutines a parallelFor call runs on (the caller
// included); worker indices passed to fn are below it.
func workers() int {
	poolOnce.Do(startPool)
	return min(runtime.GOMAXPROCS(0), poolHelpers+1)
}

// splits reports whether parallelFor(n, grain, ·) would use more than one
// goroutine. Kernels test it first and call their range function directly
// when it is false, so that the small calls of a decode step build no
// closure and allocate nothing.
func splits(n, grain int) bool {
	return n >= 2*max(grain, 1) && workers() > 1
}

// parallelFor calls fn on disjoint ranges [lo,hi) that cover [0,n), each at
// least grain long (except the last), from up to workers() goroutines; worker
// identifies the goroutine (0 ≤ worker < workers()) so fn may index
// per-worker scratch. It returns when every range is done. Ranges are claimed
// dynamically (a few per worker) so uneven work, such as causal attention
// rows, stays balanced; fn must compute each index the same way whatever
// range it falls in so results do not depend on scheduling.
func parallelFor(n, grain int, fn func(worker, lo, hi int)) {
	if n <= 0 {
		return
	}
	grain = max(grain, 1)
	procs := workers()
	if procs <= 1 || n < 2*grain {
		fn(0, 0, n)
		return
	}
	chunks := min(n/grain, 4*procs)
	j := jobPool.Get().(*job)
	j.fn = fn
	j.n = int64(n)
	j.chunk = int64((n + chunks - 1) / chunks)
	j.next.Store(0)
	j.ids.Store(0)
	for range procs - 1 {
		j.wg.Add(1)
		sent := false
		select {
		case poolCh <- j:
			sent = true
		default:
		}
		if !sent {
			j.wg.Done()
			break // no helper idle now: do the rest ourselves
		}
	}
	j.run(0)
	j.wg.Wait()
	j.fn = nil
	jobPool.Put(j)
}

// f32Pool holds reusable float32 scratch slices (as *[]float32 so Put does
// not allocate).
var f32Pool sync.Pool

// getF32 returns a pooled scratch slice of length n; give it back with putF32.
func getF32(n int) *[]float32 {
	if p, ok := f32Pool.Get().(*[]float32); ok {
		if cap(*p) >= n {
			*p = (*p)[:n]
			return p
		}
	}
	s := make([]float32, n)
	return &s
}

func putF32(p *[]float32) { f32Pool.Put(p) }
