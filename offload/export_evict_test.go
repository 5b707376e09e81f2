package offload

import (
	"sync"

	"github.com/flextensor-go/flextensor/loader"
)

// EvictRecord is what packing under FT_PACK_EVICT=1 did, recorded by the
// hooks SetPackEvictForTest installs (the real eviction calls still run).
type EvictRecord struct {
	Events  []string // "evict" (before allocating), "alloc UNIT", "read UNIT", in order
	Files   []string // files EvictMapped reported, over all its calls
	Ranges  int      // EvictBytes calls that found a mapped file
	Missed  int      // EvictBytes calls that did not
	Tensors []string // EvictTensor calls on a weight source
}

// evictLog is an EvictRecord under a lock.
type evictLog struct {
	mu sync.Mutex
	EvictRecord
}

// SetPackEvictForTest sets FT_PACK_EVICT's switch to on and records each
// eviction call and pack event until restore, which undoes both; snapshot
// copies the record so far.
func SetPackEvictForTest(on bool) (snapshot func() EvictRecord, restore func()) {
	rec := &evictLog{}
	oldOn, oldCalls, oldEvents := packEvict, evictCalls, packEvents
	packEvict = on
	all, bytes, tensor := evictCalls.all, evictCalls.bytes, evictCalls.tensor
	evictCalls.all = func() (loader.Eviction, error) {
		ev, err := all()
		rec.mu.Lock()
		rec.Events = append(rec.Events, "evict")
		rec.Files = append(rec.Files, ev.Files...)
		rec.mu.Unlock()
		return ev, err
	}
	evictCalls.bytes = func(b []byte) (int64, bool, error) {
		n, ok, err := bytes(b)
		rec.mu.Lock()
		if ok {
			rec.Ranges++
		} else {
			rec.Missed++
		}
		rec.mu.Unlock()
		return n, ok, err
	}
	evictCalls.tensor = func(src WeightSource, name string) (int64, bool, error) {
		n, ok, err := tensor(src, name)
		rec.mu.Lock()
		rec.Tensors = append(rec.Tensors, name)
		rec.mu.Unlock()
		return n, ok, err
	}
	packEvents = func(event, unit string) {
		rec.mu.Lock()
		rec.Events = append(rec.Events, event+" "+unit)
		rec.mu.Unlock()
	}
	snapshot = func() EvictRecord {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		r := rec.EvictRecord
		return EvictRecord{Events: append([]string(nil), r.Events...), Files: append([]string(nil), r.Files...),
			Ranges: r.Ranges, Missed: r.Missed, Tensors: append([]string(nil), r.Tensors...)}
	}
	return snapshot, func() { packEvict, evictCalls, packEvents = oldOn, oldCalls, oldEvents }
}
