package host

import (
	"sync"
	"sync/atomic"
	"time"
)

// phaseSpin is how long a worker waiting at a RunPhases barrier spins
// before it parks until the phase opens (whatever the pool's SpinWait: the
// wait is a phase's tail, a chunk or two, when every worker is running; a
// worker the OS took away can make it long, and then the others sleep).
const phaseSpin = 50 * time.Microsecond

// Phase is one step of a RunPhases job: Fn over [0,N) in chunks of Chunk
// (claimed dynamically, as Run does), then After, called once by the
// worker that finished the phase's last chunk (or before the job, for a
// leading empty phase) before the next phase opens. After sees every
// write of the phase's chunks; the next phase's chunks see After's writes.
type Phase struct {
	N, Chunk int
	Fn       func(worker, lo, hi int)
	After    func() // may be nil
}

// phasedJob is a RunPhases job: cur is the open phase (len: all done).
type phasedJob struct {
	phases  []Phase
	cur     atomic.Int32
	st      []phaseState
	ph5     [5]Phase      // phases' storage for up to five (a decode layer's)
	st5     [5]phaseState // st's storage likewise
	mu      sync.Mutex
	opened  sync.Cond    // broadcast when cur moves and someone waits; L is &mu
	waiters atomic.Int32 // workers parked (or parking) on opened
}

// open moves the job to phase i and wakes the parked workers.
func (pj *phasedJob) open(i int) {
	pj.cur.Store(int32(i))
	if pj.waiters.Load() > 0 {
		pj.mu.Lock()
		pj.opened.Broadcast()
		pj.mu.Unlock()
	}
}

// await returns once phase c is closed: spinning for up to phaseSpin,
// then parked.
func (p *Pool) await(pj *phasedJob, c int) {
	closed := func() bool { return int(pj.cur.Load()) != c }
	if p.spinUpTo(phaseSpin, closed) {
		return
	}
	pj.mu.Lock()
	pj.waiters.Add(1)
	for !closed() {
		pj.opened.Wait()
	}
	pj.waiters.Add(-1)
	pj.mu.Unlock()
}

type phaseState struct {
	next, done atomic.Int64
	_          [48]byte
}

// RunPhases runs the phases in order as one pool job: the helpers are
// handed the job once and go from one phase to the next by spinning on
// the phase counter (a barrier of a few hundred nanoseconds between
// phases when every worker runs, where a Run per phase would publish, wake and join each), so a
// sequence of dependent steps — a decode layer's q/k/v, attention, o,
// gate·up and down GEMVs with the small serial work between them in the
// phases' After — costs one hand-off. Like Run it is serialised with the
// pool's other Runs and returns when every phase is done; fn and After
// must not call Run.
func (p *Pool) RunPhases(phases []Phase) {
	p.mu.Lock()
	defer p.mu.Unlock()
	// The job keeps its own copy of the phases: a helper that looks in
	// late (the job over) reads them after the caller may have reused its
	// slice for the next job, and must find this job's sizes there, all
	// of whose chunks are claimed.
	pj := &phasedJob{}
	if len(phases) <= len(pj.st5) {
		pj.phases, pj.st = append(pj.ph5[:0], phases...), pj.st5[:len(phases)]
	} else {
		pj.phases, pj.st = append([]Phase(nil), phases...), make([]phaseState, len(phases))
	}
	pj.opened.L = &pj.mu
	phases = pj.phases
	for i := range phases {
		phases[i].Chunk = max(phases[i].Chunk, 1)
	}
	first := pj.skipEmpty(0)
	if first >= len(phases) {
		return
	}
	pj.cur.Store(int32(first))
	if p.closed || p.threads <= 1 {
		p.runPhased(pj, 0)
		return
	}
	p.publish(&poolJob{phased: pj, helpers: p.threads - 1})
	p.runPhased(pj, 0)
}

// skipEmpty runs the After of the empty phases from i on and returns the
// first non-empty one (len: none).
func (pj *phasedJob) skipEmpty(i int) int {
	for ; i < len(pj.phases) && pj.phases[i].N <= 0; i++ {
		if f := pj.phases[i].After; f != nil {
			f()
		}
	}
	return i
}

// runPhased takes part in pj until its last phase is done: claims the open
// phase's chunks, and, having finished a phase's last chunk, runs its After
// and opens the next; with nothing to claim it waits for the next phase.
func (p *Pool) runPhased(pj *phasedJob, worker int) {
	n := len(pj.phases)
	for {
		c := int(pj.cur.Load())
		if c >= n {
			return
		}
		ph, s := &pj.phases[c], &pj.st[c]
		N, chunk := int64(ph.N), int64(ph.Chunk)
		for {
			hi := s.next.Add(chunk)
			lo := hi - chunk
			if lo >= N {
				break
			}
			hi = min(hi, N)
			ph.Fn(worker, int(lo), int(hi))
			if s.done.Add(hi-lo) == N {
				if ph.After != nil {
					ph.After()
				}
				pj.open(pj.skipEmpty(c + 1))
				break
			}
		}
		// Wait for phase c to close (its last chunks may be in flight on
		// other workers).
		p.await(pj, c)
	}
}
