package offload

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flextensor-go/flextensor/loader"
)

// packEvict is FT_PACK_EVICT=1 (read once; off by default): packing hands
// the checkpoint's page-cache pages back to the kernel before it allocates
// the host blocks, allocates every block before reading any weight into
// them, and drops each unit's file bytes from the page cache once they are
// copied. On a machine whose memory reads at different rates by physical
// page (the H200 KVM guest), the kernel hands freed page-cache pages out
// again first, so blocks allocated after the eviction get them instead of
// the page cache getting them back. The cost: the next start reads the
// checkpoint from disk.
var packEvict = os.Getenv("FT_PACK_EVICT") == "1"

// evictCalls are the page-cache eviction calls (loader's); tests count
// them.
var evictCalls = struct {
	all    func() (loader.Eviction, error)
	bytes  func(b []byte) (int64, bool, error)
	tensor func(src WeightSource, name string) (int64, bool, error)
}{
	all:   loader.EvictMapped,
	bytes: loader.EvictBytes,
	tensor: func(src WeightSource, name string) (int64, bool, error) {
		ev, ok := src.(interface {
			EvictTensor(name string) (int64, error)
		})
		if !ok {
			return 0, false, nil
		}
		n, err := ev.EvictTensor(name)
		return n, true, err
	},
}

// packEvents, when set (tests), is told of each block allocated ("alloc")
// and each unit read ("read") while packing, from the packing goroutines.
var packEvents func(event, unit string)

// evictTally sums what packing evicted after the units' reads.
type evictTally struct {
	bytes, ranges, skipped, ns atomic.Int64
	mu                         sync.Mutex
	firstErr                   error
	errs                       int
}

// evictBefore drops the open checkpoints' pages from the page cache before
// any block is allocated, and says so under a Trace.
func (s *stager) evictBefore() {
	t0 := time.Now()
	ev, err := evictCalls.all()
	d := time.Since(t0)
	line := fmt.Sprintf("pack evict: before alloc: %d files, %.1f MiB (madvise+fadvise DONTNEED)", len(ev.Files), float64(ev.Bytes)/(1<<20))
	if err != nil {
		line += fmt.Sprintf("; errors (ignored): %v", err)
	}
	s.trace(line, d)
}

// evictUnit drops unit u's parameters' file bytes from the page cache once
// they are in its block; errors are counted, never fatal.
func (s *stager) evictUnit(u *unit, t *evictTally) {
	t0 := time.Now()
	for i, p := range u.params {
		var n int64
		var ok bool
		var err error
		if s.src != nil {
			n, ok, err = evictCalls.tensor(s.src, p.Name())
		} else if b := u.orig[i].Bytes(); b != nil {
			n, ok, err = evictCalls.bytes(b)
		}
		switch {
		case err != nil:
			t.mu.Lock()
			if t.firstErr == nil {
				t.firstErr = fmt.Errorf("%s: %w", p.Name(), err)
			}
			t.errs++
			t.mu.Unlock()
		case ok:
			t.bytes.Add(n)
			t.ranges.Add(1)
		default:
			t.skipped.Add(1)
		}
	}
	t.ns.Add(int64(time.Since(t0)))
}

// traceAfter reports what evictUnit dropped.
func (s *stager) traceAfter(t *evictTally) {
	line := fmt.Sprintf("pack evict: after each unit's read: %.1f MiB in %d tensors (%d not file-backed)",
		float64(t.bytes.Load())/(1<<20), t.ranges.Load(), t.skipped.Load())
	if t.errs > 0 {
		line += fmt.Sprintf("; %d errors (ignored), first: %v", t.errs, t.firstErr)
	}
	s.trace(line, time.Duration(t.ns.Load()))
}
