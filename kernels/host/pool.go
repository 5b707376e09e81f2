package host

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Pool is a persistent set of worker goroutines that split one range of
// work at a time: Run hands [0,n) out in chunks to Threads goroutines (the
// caller is one of them) and returns when every chunk is done. Runs on one
// Pool are serialised; fn must not call Run on the same Pool.
//
// A decode step issues a few pool jobs per layer with a few microseconds of
// serial work between them, so a helper that finished a job spins for a
// while (SpinWait; yielding its P now and then so other goroutines run)
// watching for the next one before it parks: a spinning helper starts a job
// within about a hundred nanoseconds of Run publishing it, where waking a
// parked goroutine costs microseconds (and the caller wakes the parked
// helpers one after another). A Run ends when its last chunk is done, not
// when every helper has looked in: a helper the OS has not scheduled yet
// (more threads than free cores) holds nobody up, it finds no chunk left.
// The caller waits for the chunks in flight the same way, spinning, then
// parked.
type Pool struct {
	threads int
	spin    time.Duration
	// afterPhases is how long a helper spins for the next job after a
	// RunPhases job (a host stretch's next layer comes within
	// microseconds) before it parks: phaseSpin unless the spin was set
	// explicitly (Options.SpinWait, FT_HOST_SPIN), then spin.
	afterPhases time.Duration

	mu      sync.Mutex // one Run at a time
	closed  bool
	scratch [][]float32 // per worker, guarded by mu
	tiles   []poolTile  // per worker

	job     atomic.Pointer[poolJob] // the latest published job
	workers []poolWorker            // index 0 unused (the caller)
	done    chan struct{}           // a job's last helper wakes its parked caller
}

// poolTile is a worker's buffer for the GEMV tiles' outputs, a cache line
// of its own.
type poolTile struct {
	v [12]float32
	_ [16]byte
}

type poolWorker struct {
	parked atomic.Int32 // 1 while parked on wake
	wake   chan struct{}
	_      [48]byte // keep the workers' flags on separate cache lines
}

// poolJob is one Run. A helper that sees it late (the Run over) finds no
// chunk to claim; a new Run publishes a new job.
type poolJob struct {
	fn      func(worker, lo, hi int)
	n       int64
	chunk   int64
	helpers int        // workers 1..helpers take part
	quit    bool       // Close's job: the helpers return
	phased  *phasedJob // a RunPhases job (fn, n, chunk unused)
	next    atomic.Int64
	done    atomic.Int64 // items finished
	// waiting is 1 while this job's caller is parked on the pool's done
	// channel. It is the job's own: a helper that finishes an earlier
	// job's last chunk late cannot wake the caller of a later one.
	waiting atomic.Int32
}

// SpinWait is how long an idle pool helper (or a Run waiting for its
// helpers' chunks) spins before it parks.
const SpinWait = 50 * time.Microsecond

// NewPool starts a pool of threads goroutines (threads-1 helpers plus the
// caller); threads ≤ 0 means runtime.GOMAXPROCS(0). Close stops it.
func NewPool(threads int) *Pool { return newPool(threads, SpinWait) }

// newPool is NewPool with helpers that spin for spin before parking.
func newPool(threads int, spin time.Duration) *Pool {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	p := &Pool{threads: threads, spin: spin, afterPhases: max(spin, phaseSpin), scratch: make([][]float32, threads),
		workers: make([]poolWorker, threads), tiles: make([]poolTile, threads), done: make(chan struct{}, 1)}
	idle := &poolJob{} // generation 0: nothing to do
	p.job.Store(idle)
	for w := 1; w < threads; w++ {
		p.workers[w].wake = make(chan struct{}, 1)
		go p.helper(w, idle)
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
	p.publish(&poolJob{quit: true, helpers: p.threads - 1})
}

// publish makes j the current job and wakes the parked helpers it asks for.
func (p *Pool) publish(j *poolJob) {
	p.job.Store(j)
	for w := 1; w <= j.helpers; w++ {
		pw := &p.workers[w]
		if pw.parked.Load() == 1 && pw.parked.CompareAndSwap(1, 0) {
			pw.wake <- struct{}{}
		}
	}
}

// helper is worker w's loop: wait for a job other than the last one seen,
// take part if it asks for w. It starts having seen idle, the pool's first
// job, not whatever is current when the goroutine first runs: a job
// published before that (Close's quit, for a pool closed at once) is then
// still one it has to take.
func (p *Pool) helper(w int, idle *poolJob) {
	pw := &p.workers[w]
	seen := idle
	spin := p.spin
	for {
		j := p.awaitJob(pw, seen, spin)
		seen, spin = j, p.spin
		if w > j.helpers {
			continue
		}
		if j.quit {
			return
		}
		if j.phased != nil {
			p.runPhased(j.phased, w)
			spin = p.afterPhases
			continue
		}
		p.runChunks(j, w)
	}
}

// awaitJob returns the current job once it is not seen: spinning for up
// to spin, then parked on pw.wake.
func (p *Pool) awaitJob(pw *poolWorker, seen *poolJob, spin time.Duration) *poolJob {
	if p.spinUpTo(spin, func() bool { return p.job.Load() != seen }) {
		return p.job.Load()
	}
	for {
		pw.parked.Store(1)
		if j := p.job.Load(); j != seen {
			if !pw.parked.CompareAndSwap(1, 0) {
				<-pw.wake // publish took the flag: its token is on the way
			}
			return j
		}
		<-pw.wake
		if j := p.job.Load(); j != seen {
			return j
		}
	}
}

// spinFor spins until cond holds or p.spin has passed, yielding the P
// every few dozen checks; it reports whether cond held.
func (p *Pool) spinFor(cond func() bool) bool { return p.spinUpTo(p.spin, cond) }

// spinUpTo is spinFor for up to spin.
func (p *Pool) spinUpTo(spin time.Duration, cond func() bool) bool {
	if spin <= 0 {
		return cond()
	}
	var start time.Time
	for i := 1; ; i++ {
		if cond() {
			return true
		}
		if i%32 == 0 {
			if start.IsZero() {
				start = time.Now()
			} else if time.Since(start) > spin {
				return false
			}
			runtime.Gosched()
		} else {
			spinPause()
		}
	}
}

// runChunks claims and runs j's chunks until none is left; the one that
// finishes the last item wakes a parked caller.
func (p *Pool) runChunks(j *poolJob, worker int) {
	for {
		hi := j.next.Add(j.chunk)
		lo := hi - j.chunk
		if lo >= j.n {
			return
		}
		hi = min(hi, j.n)
		j.fn(worker, int(lo), int(hi))
		if j.done.Add(hi-lo) == j.n && worker != 0 && j.waiting.Load() == 1 && j.waiting.CompareAndSwap(1, 0) {
			p.done <- struct{}{}
		}
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
	helpers := min(p.threads-1, (n+chunk-1)/chunk-1)
	if p.closed || helpers <= 0 {
		fn(0, 0, n)
		return
	}
	j := &poolJob{fn: fn, n: int64(n), chunk: int64(chunk), helpers: helpers}
	p.publish(j)
	p.runChunks(j, 0)
	finished := func() bool { return j.done.Load() == j.n }
	if !p.spinFor(finished) {
		j.waiting.Store(1)
		if finished() {
			if !j.waiting.CompareAndSwap(1, 0) {
				<-p.done // a helper took the flag: its token is on the way
			}
		} else {
			<-p.done
		}
	}
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

// tile is worker's tile buffer (see dense). Call it only inside a Run's fn,
// with that fn's worker.
func (p *Pool) tile(worker int) *[12]float32 { return &p.tiles[worker].v }
