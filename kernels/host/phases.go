package host

import (
	"runtime"
	"sync/atomic"
)

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
	phases []Phase
	cur    atomic.Int32
	st     []phaseState
}

type phaseState struct {
	next, done atomic.Int64
	_          [48]byte
}

// RunPhases runs the phases in order as one pool job: the helpers are
// handed the job once and go from one phase to the next by spinning on
// the phase counter (a barrier of a few hundred nanoseconds between
// phases, where a Run per phase would publish, wake and join each), so a
// sequence of dependent steps — a decode layer's q/k/v, attention, o,
// gate·up and down GEMVs with the small serial work between them in the
// phases' After — costs one hand-off. Like Run it is serialised with the
// pool's other Runs and returns when every phase is done; fn and After
// must not call Run.
func (p *Pool) RunPhases(phases []Phase) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pj := &phasedJob{phases: phases, st: make([]phaseState, len(phases))}
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
				pj.cur.Store(int32(pj.skipEmpty(c + 1)))
				break
			}
		}
		// Wait for phase c to close (its last chunks may be in flight on
		// other workers).
		for i := 1; int(pj.cur.Load()) == c; i++ {
			if i%32 == 0 {
				runtime.Gosched()
			} else {
				spinPause()
			}
		}
	}
}
