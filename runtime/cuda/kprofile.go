//go:build cuda

package cuda

import (
	"fmt"
	"sync"

	"github.com/flextensor-go/flextensor/runtime"
)

// kernelProfile collects the launches of one StartKernelProfile …
// StopKernelProfile window: an event before and after each.
type kernelProfile struct {
	mu   sync.Mutex
	recs []pendingKernel
	err  error
}

type pendingKernel struct {
	name       string
	bytes      int64
	start, end *Event
}

// StartKernelProfile begins timing every kernel launch and cuBLAS call of
// this device (runtime.KernelProfiler).
func (d *Device) StartKernelProfile() error {
	if !d.kprof.CompareAndSwap(nil, &kernelProfile{}) {
		return fmt.Errorf("%s: a kernel profile is already running", d.Name())
	}
	return nil
}

// StopKernelProfile ends the profile, waits for its kernels and returns
// them in launch order.
func (d *Device) StopKernelProfile() ([]runtime.KernelRecord, error) {
	p := d.kprof.Swap(nil)
	if p == nil {
		return nil, fmt.Errorf("%s: no kernel profile is running", d.Name())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return nil, p.err
	}
	out := make([]runtime.KernelRecord, 0, len(p.recs))
	for _, r := range p.recs {
		if err := r.end.Synchronize(); err != nil {
			return nil, err
		}
		el, err := r.end.ElapsedSince(r.start)
		if err != nil {
			return nil, err
		}
		out = append(out, runtime.KernelRecord{Name: r.name, Bytes: r.bytes, Ms: float64(el.Nanoseconds()) / 1e6})
	}
	return out, nil
}

// timed runs launch between two events on s when a profile is running
// (named name, moving bytes), else just runs it.
func (d *Device) timed(s *Stream, name string, bytes int64, launch func() error) error {
	p := d.kprof.Load()
	if p == nil {
		return launch()
	}
	start, err := s.RecordEvent()
	if err != nil {
		return err
	}
	if err := launch(); err != nil {
		return err
	}
	end, err := s.RecordEvent()
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.recs = append(p.recs, pendingKernel{name: name, bytes: bytes, start: start, end: end})
	p.mu.Unlock()
	return nil
}

var _ runtime.KernelProfiler = (*Device)(nil)
