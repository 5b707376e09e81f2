package runtime

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// CPUDevice is the pure-Go device: device memory is ordinary Go memory with
// byte accounting and an optional limit, so the offload engine's budgets and
// ordering run for real without a GPU. Streams made by NewStream run their
// copies on a goroutine of their own; Compute is the calling goroutine.
type CPUDevice struct {
	mem, host *Accountant
	compute   *syncStream
	mu        sync.Mutex
	streams   []*cpuStream
	closed    atomic.Bool    // set by Close: allocations and NewStream then fail
	name      string         // "" = "cpu" (NewCPUNamed)
	atClose   []func() error // AtClose's functions, guarded by mu
	// CopyFault, when set, is called before each copy a stream runs; an error
	// it returns fails that copy (fault injection for tests).
	CopyFault func(op string, bytes int64) error
	// AllocFault, when set, is called before each device allocation; an error
	// it returns fails the allocation (fault injection for tests).
	AllocFault func(label string, bytes int64) error
}

// NewCPU returns a CPU device whose device memory is limited to limit bytes
// (0 = no limit). Host (staging) memory is accounted without a limit.
func NewCPU(limit int64) *CPUDevice {
	d := &CPUDevice{mem: NewAccountant("cpu device memory", limit), host: NewAccountant("cpu host memory", 0)}
	d.compute = &syncStream{dev: d}
	return d
}

// Name is "cpu", or the name NewCPUNamed gave ("cpu:1").
func (d *CPUDevice) Name() string {
	if d.name != "" {
		return d.name
	}
	return "cpu"
}

// NewCPUNamed is NewCPU for one of several CPU devices in a process (the
// ranks of a sharded model's CPU stand-in): Name and the memory errors say
// name ("cpu:1").
func NewCPUNamed(name string, limit int64) *CPUDevice {
	d := &CPUDevice{mem: NewAccountant(name+" device memory", limit), host: NewAccountant(name+" host memory", 0), name: name}
	d.compute = &syncStream{dev: d}
	return d
}

// Kind is KindCPU.
func (d *CPUDevice) Kind() DeviceKind { return KindCPU }

// Memory reports the device pool.
func (d *CPUDevice) Memory() MemStats { return d.mem.Stats() }

// HostMemory reports the host (staging) pool.
func (d *CPUDevice) HostMemory() MemStats { return d.host.Stats() }

// SetMemoryLimit changes the device pool's limit (0 = none).
func (d *CPUDevice) SetMemoryLimit(limit int64) { d.mem.SetLimit(limit) }

// SetHostMemoryLimit changes the host pool's limit (AllocHost; 0 = none):
// a host allocation beyond it fails with an error wrapping ErrOutOfMemory.
func (d *CPUDevice) SetHostMemoryLimit(limit int64) { d.host.SetLimit(limit) }

// ResetPeak sets the device pool's peak to its bytes in use.
func (d *CPUDevice) ResetPeak() { d.mem.ResetPeak() }

// errClosed is what allocating on a closed cpu device gives (it wraps
// ErrDeviceClosed).
func (d *CPUDevice) errClosed(op, label string) error {
	return fmt.Errorf("%s: %s %q: %w", d.Name(), op, label, ErrDeviceClosed)
}

// Alloc takes zeroed device memory. After Close it is an error.
func (d *CPUDevice) Alloc(bytes int64, label string) (*DeviceBuffer, error) {
	if d.closed.Load() {
		return nil, d.errClosed("allocation", label)
	}
	if d.AllocFault != nil {
		if err := d.AllocFault(label, bytes); err != nil {
			return nil, fmt.Errorf("cpu device memory: allocation %q of %s: %w", label, FormatBytes(bytes), err)
		}
	}
	if err := d.mem.Reserve(bytes, label); err != nil {
		return nil, err
	}
	return NewDeviceBuffer(d, bytes, label, make([]byte, bytes), 0, func() { d.mem.Release(bytes) }), nil
}

// Wrap accounts existing memory (an mmapped checkpoint, say) as device memory
// without copying it. Free releases the accounting; the memory stays the
// caller's. After Close it is an error.
func (d *CPUDevice) Wrap(data []byte, label string) (*DeviceBuffer, error) {
	if d.closed.Load() {
		return nil, d.errClosed("wrap", label)
	}
	n := int64(len(data))
	if err := d.mem.Reserve(n, label); err != nil {
		return nil, err
	}
	return NewDeviceBuffer(d, n, label, data, 0, func() { d.mem.Release(n) }), nil
}

// AllocHost takes zeroed host memory. After Close it is an error.
func (d *CPUDevice) AllocHost(bytes int64, label string) (*HostBuffer, error) {
	if d.closed.Load() {
		return nil, d.errClosed("host allocation", label)
	}
	if err := d.host.Reserve(bytes, label); err != nil {
		return nil, err
	}
	return NewHostBuffer(d, label, make([]byte, bytes), func() { d.host.Release(bytes) }), nil
}

// Compute is the calling goroutine as a stream: copies run at once, Record
// returns a completed event, and Wait blocks the caller.
func (d *CPUDevice) Compute() Stream { return d.compute }

// NewStream starts a stream whose work runs in order on a goroutine of its own.
func (d *CPUDevice) NewStream(name string) (Stream, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed.Load() {
		return nil, errors.New("cpu device: NewStream after Close")
	}
	s := &cpuStream{dev: d, name: name, work: make(chan func(), 1024), stopped: make(chan struct{})}
	go s.run()
	d.streams = append(d.streams, s)
	return s, nil
}

// AtClose registers f to run first thing in Close, last registered first,
// before the device checks that its memory was all freed: what holds the
// device's memory or works on it (a backend's scratch and workers) is
// released with it. An error f returns is one of Close's.
func (d *CPUDevice) AtClose(f func() error) {
	d.mu.Lock()
	d.atClose = append(d.atClose, f)
	d.mu.Unlock()
}

// Close stops the device's streams; allocations after it fail. Device or
// host bytes still in use are reported as an error (they are leaks of the
// caller's); freeing them after Close is fine.
func (d *CPUDevice) Close() error {
	d.mu.Lock()
	hooks := d.atClose
	d.atClose = nil
	d.mu.Unlock()
	var errs []error
	for i := len(hooks) - 1; i >= 0; i-- {
		if err := hooks[i](); err != nil {
			errs = append(errs, err)
		}
	}
	d.mu.Lock()
	streams := d.streams
	d.streams = nil
	d.closed.Store(true)
	d.mu.Unlock()
	for _, s := range streams {
		if err := s.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if m := d.mem.Stats(); m.InUse != 0 {
		errs = append(errs, fmt.Errorf("cpu device: closed with %s of device memory in %d allocations still held", FormatBytes(m.InUse), m.Count))
	}
	if m := d.host.Stats(); m.InUse != 0 {
		errs = append(errs, fmt.Errorf("cpu device: closed with %s of host memory in %d allocations still held", FormatBytes(m.InUse), m.Count))
	}
	return errors.Join(errs...)
}

// cpuEvent completes when its channel closes; err and at are written before.
type cpuEvent struct {
	done chan struct{}
	err  error
	at   time.Time
}

func newCompletedEvent(err error) *cpuEvent {
	e := &cpuEvent{done: make(chan struct{}), err: err, at: time.Now()}
	close(e.done)
	return e
}

func (e *cpuEvent) Synchronize() error { <-e.done; return e.err }

func (e *cpuEvent) Done() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

func (e *cpuEvent) ElapsedSince(start Event) (time.Duration, error) {
	s, ok := start.(*cpuEvent)
	if !ok {
		return 0, fmt.Errorf("cpu event: ElapsedSince an event of another device (%T)", start)
	}
	if !e.Done() || !s.Done() {
		return 0, errors.New("cpu event: ElapsedSince on an event that has not completed")
	}
	return e.at.Sub(s.at), nil
}

func asCPUEvent(e Event) (*cpuEvent, error) {
	ce, ok := e.(*cpuEvent)
	if !ok || ce == nil {
		return nil, fmt.Errorf("cpu stream: cannot wait on an event of type %T", e)
	}
	return ce, nil
}

// copyBytes is the one copy routine of the CPU device: it checks ranges and
// that neither buffer has been freed.
func (d *CPUDevice) copyBytes(op string, dst []byte, dstFreed bool, dstOff int64, src []byte, srcFreed bool, srcOff, n int64) error {
	if dstFreed || srcFreed {
		return fmt.Errorf("cpu %s of %d bytes: buffer freed before the copy ran", op, n)
	}
	if err := CheckRange("cpu "+op+" destination", dstOff, n, int64(len(dst))); err != nil {
		return err
	}
	if err := CheckRange("cpu "+op+" source", srcOff, n, int64(len(src))); err != nil {
		return err
	}
	if d.CopyFault != nil {
		if err := d.CopyFault(op, n); err != nil {
			return fmt.Errorf("cpu %s of %d bytes: %w", op, n, err)
		}
	}
	copy(dst[dstOff:dstOff+n], src[srcOff:srcOff+n])
	return nil
}

func (d *CPUDevice) checkOwn(what string, dev Device) error {
	if dev != Device(d) {
		return fmt.Errorf("cpu stream: %s buffer belongs to device %v", what, deviceName(dev))
	}
	return nil
}

func deviceName(d Device) string {
	if d == nil {
		return "<nil>"
	}
	return d.Name()
}

// HostWork is implemented by the CPU device's streams: work of the host's
// own enqueued in the stream's order, as a copy is (a CPU backend's op on
// another stream than its compute one, such as the offload engine's
// unpacking on the copy stream).
type HostWork interface {
	// Enqueue runs f after the work enqueued before it; its error is the
	// stream's as a failed copy's is.
	Enqueue(f func() error) error
}

// syncStream runs everything on the caller's goroutine.
type syncStream struct{ dev *CPUDevice }

// Enqueue runs f now (HostWork).
func (s *syncStream) Enqueue(f func() error) error { return f() }

func (s *syncStream) CopyH2D(dst *DeviceBuffer, dstOff int64, src *HostBuffer, srcOff, n int64) error {
	return s.dev.copyBytes("H2D copy", dst.data, dst.Freed(), dstOff, src.data, src.freed.Load(), srcOff, n)
}
func (s *syncStream) CopyD2H(dst *HostBuffer, dstOff int64, src *DeviceBuffer, srcOff, n int64) error {
	return s.dev.copyBytes("D2H copy", dst.data, dst.freed.Load(), dstOff, src.data, src.Freed(), srcOff, n)
}
func (s *syncStream) CopyD2D(dst *DeviceBuffer, dstOff int64, src *DeviceBuffer, srcOff, n int64) error {
	return s.dev.copyBytes("D2D copy", dst.data, dst.Freed(), dstOff, src.data, src.Freed(), srcOff, n)
}
func (s *syncStream) Record() (Event, error) { return newCompletedEvent(nil), nil }
func (s *syncStream) Wait(e Event) error {
	ce, err := asCPUEvent(e)
	if err != nil {
		return err
	}
	return ce.Synchronize()
}
func (s *syncStream) Synchronize() error { return nil }
func (s *syncStream) Close() error       { return nil }

// cpuStream runs its work in order on its own goroutine. The first error of
// any work is sticky: later events carry it and Synchronize returns it.
type cpuStream struct {
	dev     *CPUDevice
	name    string
	work    chan func()
	stopped chan struct{}
	mu      sync.Mutex
	closed  bool
	err     error // touched only by the stream's goroutine
}

func (s *cpuStream) run() {
	defer close(s.stopped)
	for f := range s.work {
		f()
	}
}

func (s *cpuStream) enqueue(f func()) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("cpu stream %q: used after Close", s.name)
	}
	s.work <- f
	return nil
}

// Enqueue runs f in the stream's order (HostWork); after an earlier
// failure it does not run.
func (s *cpuStream) Enqueue(f func() error) error {
	return s.enqueue(func() {
		if s.err == nil {
			s.fail(f())
		}
	})
}

func (s *cpuStream) fail(err error) {
	if err != nil && s.err == nil {
		s.err = fmt.Errorf("cpu stream %q: %w", s.name, err)
	}
}

func (s *cpuStream) CopyH2D(dst *DeviceBuffer, dstOff int64, src *HostBuffer, srcOff, n int64) error {
	if err := s.dev.checkOwn("H2D destination", dst.dev); err != nil {
		return err
	}
	if err := CheckRange("H2D copy destination", dstOff, n, dst.size); err != nil {
		return err
	}
	if err := CheckRange("H2D copy source", srcOff, n, src.size); err != nil {
		return err
	}
	return s.enqueue(func() {
		if s.err == nil {
			s.fail(s.dev.copyBytes("H2D copy", dst.data, dst.Freed(), dstOff, src.data, src.freed.Load(), srcOff, n))
		}
	})
}

func (s *cpuStream) CopyD2H(dst *HostBuffer, dstOff int64, src *DeviceBuffer, srcOff, n int64) error {
	if err := CheckRange("D2H copy destination", dstOff, n, dst.size); err != nil {
		return err
	}
	if err := CheckRange("D2H copy source", srcOff, n, src.size); err != nil {
		return err
	}
	return s.enqueue(func() {
		if s.err == nil {
			s.fail(s.dev.copyBytes("D2H copy", dst.data, dst.freed.Load(), dstOff, src.data, src.Freed(), srcOff, n))
		}
	})
}

func (s *cpuStream) CopyD2D(dst *DeviceBuffer, dstOff int64, src *DeviceBuffer, srcOff, n int64) error {
	if err := CheckRange("D2D copy destination", dstOff, n, dst.size); err != nil {
		return err
	}
	if err := CheckRange("D2D copy source", srcOff, n, src.size); err != nil {
		return err
	}
	return s.enqueue(func() {
		if s.err == nil {
			s.fail(s.dev.copyBytes("D2D copy", dst.data, dst.Freed(), dstOff, src.data, src.Freed(), srcOff, n))
		}
	})
}

func (s *cpuStream) Record() (Event, error) {
	e := &cpuEvent{done: make(chan struct{})}
	err := s.enqueue(func() {
		e.err, e.at = s.err, time.Now()
		close(e.done)
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}

func (s *cpuStream) Wait(e Event) error {
	ce, err := asCPUEvent(e)
	if err != nil {
		return err
	}
	return s.enqueue(func() { s.fail(ce.Synchronize()) })
}

func (s *cpuStream) Synchronize() error {
	e, err := s.Record()
	if err != nil {
		return err
	}
	return e.Synchronize()
}

// Close drains the queue, stops the goroutine and returns the sticky error.
func (s *cpuStream) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.work)
	s.mu.Unlock()
	<-s.stopped
	s.dev.forget(s)
	return s.err
}

// forget drops a closed stream from the device's list, so that a device
// whose streams come and go (an engine per offload, a new copy stream after
// a failed copy) does not keep every one it ever made.
func (d *CPUDevice) forget(s *cpuStream) {
	d.mu.Lock()
	d.streams = slices.DeleteFunc(d.streams, func(x *cpuStream) bool { return x == s })
	d.mu.Unlock()
}
