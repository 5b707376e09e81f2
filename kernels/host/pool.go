package host

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Pool is a persistent set of worker goroutines that split one range of
// work at a time: Run hands [0,n) out in chunks to Threads goroutines (the
// caller is one of them) and returns when every chunk is done. Waking a
// parked worker costs about a microsecond; starting goroutines per GEMV
// would cost several. Runs on one Pool are serialised; fn must not call Run
// on the same Pool.
type Pool struct {
	threads int
	mu      sync.Mutex // one Run at a time
	wake    []chan *poolJob
	closed  bool
	scratch [][]float32 // per worker, guarded by mu
}

type poolJob struct {
	fn    func(worker, lo, hi int)
	n     int64
	chunk int64
	next  atomic.Int64
	wg    sync.WaitGroup
}

// NewPool starts a pool of threads goroutines (threads-1 helpers plus the
// caller); threads ≤ 0 means runtime.GOMAXPROCS(0). Close stops it.
func NewPool(threads int) *Pool {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	p := &Pool{threads: threads, scratch: make([][]float32, threads)}
	for w := 1; w < threads; w++ {
		ch := make(chan *poolJob)
		p.wake = append(p.wake, ch)
		go func(worker int) {
			for j := range ch {
				j.run(worker)
				j.wg.Done()
			}
		}(w)
	}
	return p
}

// Threads is the number of goroutines a Run uses at most.
func (p *Pool) Threads() int { return p.threads }

// Close stops the helpers. Runs after Close execute on the caller alone.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	for _, ch := range p.wake {
		close(ch)
	}
}

func (j *poolJob) run(worker int) {
	for {
		hi := j.next.Add(j.chunk)
		lo := hi - j.chunk
		if lo >= j.n {
			return
		}
		j.fn(worker, int(lo), int(min(hi, j.n)))
	}
}

// Run calls fn on disjoint ranges [lo,hi) covering [0,n), each chunk long
// (the last may be shorter), from up to Threads goroutines; worker
// (0 ≤ worker < Threads) identifies the goroutine, for per-worker scratch
// (Scratch). Chunks are claimed dynamically, so uneven work balances.
func (p *Pool) Run(n, chunk int, fn func(worker, lo, hi int)) {
	if n <= 0 {
		return
	}
	chunk = max(chunk, 1)
	p.mu.Lock()
	defer p.mu.Unlock()
	helpers := min(len(p.wake), (n+chunk-1)/chunk-1)
	if p.closed || helpers <= 0 {
		fn(0, 0, n)
		return
	}
	j := &poolJob{fn: fn, n: int64(n), chunk: int64(chunk)}
	j.wg.Add(helpers)
	for _, ch := range p.wake[:helpers] {
		ch <- j
	}
	j.run(0)
	j.wg.Wait()
}

// Chunk is the chunk size that splits n items over the pool's threads in
// about perThread chunks each, but no smaller than minChunk items.
func (p *Pool) Chunk(n, minChunk, perThread int) int {
	c := (n + p.threads*perThread - 1) / (p.threads * perThread)
	return max(c, minChunk, 1)
}

// Scratch returns worker's scratch slice of at least n values (its
// contents are left over from earlier use). Call it only inside a Run's fn,
// with that fn's worker.
func (p *Pool) Scratch(worker, n int) []float32 {
	if cap(p.scratch[worker]) < n {
		p.scratch[worker] = make([]float32, n)
	}
	return p.scratch[worker][:n]
}
