package runtime

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// DeviceKind tells the backends apart.
type DeviceKind uint8

// The device kinds.
const (
	KindCPU  DeviceKind = iota + 1 // pure Go, the default and the reference
	KindCUDA                       // an NVIDIA GPU through cgo (build tag cuda)
	KindMeta                       // shapes and dtypes only: no storage
)

// String is the kind's name as device names spell it (cpu, cuda, meta).
func (k DeviceKind) String() string {
	switch k {
	case KindCPU:
		return "cpu"
	case KindCUDA:
		return "cuda"
	case KindMeta:
		return "meta"
	}
	return fmt.Sprintf("DeviceKind(%d)", uint8(k))
}

// Device is where tensors live and work runs: memory with byte accounting,
// host staging memory (pinned on a GPU), and streams that order copies and
// events. Kernels are not part of it: see package kernels.
type Device interface {
	// Name is the user-facing name: "cpu", "cuda:0", "meta".
	Name() string
	// Kind tells the backend.
	Kind() DeviceKind
	// Alloc takes bytes of device memory; label names the allocation in errors.
	Alloc(bytes int64, label string) (*DeviceBuffer, error)
	// AllocHost takes host memory the device copies from at full speed
	// (page-locked on a GPU).
	AllocHost(bytes int64, label string) (*HostBuffer, error)
	// Memory reports device bytes in use, their peak and the limit.
	Memory() MemStats
	// HostMemory reports the host (pinned) bytes taken through AllocHost.
	HostMemory() MemStats
	// Compute is the stream kernels run on. On the CPU it is the calling
	// goroutine: its Wait blocks the caller.
	Compute() Stream
	// NewStream makes a stream of its own (the copy stream of the offload engine).
	NewStream(name string) (Stream, error)
	// Close releases the device; buffers still held are an error reported here.
	Close() error
}

// Stream is an ordered queue of copies; events recorded on it complete when
// everything enqueued before them has.
type Stream interface {
	// CopyH2D enqueues dst[dstOff:dstOff+n] = src[srcOff:srcOff+n].
	CopyH2D(dst *DeviceBuffer, dstOff int64, src *HostBuffer, srcOff, n int64) error
	// CopyD2H enqueues dst[dstOff:dstOff+n] = src[srcOff:srcOff+n].
	CopyD2H(dst *HostBuffer, dstOff int64, src *DeviceBuffer, srcOff, n int64) error
	// CopyD2D enqueues a device-to-device copy.
	CopyD2D(dst *DeviceBuffer, dstOff int64, src *DeviceBuffer, srcOff, n int64) error
	// Record returns an event that completes when all work enqueued so far has.
	Record() (Event, error)
	// Wait makes work enqueued later wait for e.
	Wait(e Event) error
	// Synchronize blocks until all enqueued work is done and returns the first
	// error any of it met.
	Synchronize() error
	// Close drains the stream and stops it.
	Close() error
}

// Event marks a point in a stream.
type Event interface {
	// Synchronize blocks the caller until the event has completed and returns
	// the error, if any, of the work before it.
	Synchronize() error
	// Done reports whether the event has completed, without blocking.
	Done() bool
	// ElapsedSince is the time from start's completion to this event's
	// (both must have completed).
	ElapsedSince(start Event) (time.Duration, error)
}

// MemStats is byte accounting for one memory pool.
type MemStats struct {
	InUse int64 // bytes allocated and not yet freed
	Peak  int64 // the most InUse has been
	Limit int64 // the most InUse may be; 0 means no limit
	Count int64 // live allocations
}

// ErrOutOfMemory is wrapped by allocation failures caused by the limit.
var ErrOutOfMemory = errors.New("out of memory")

// ErrDeviceClosed is wrapped by the errors of allocations (device, wrapped
// and host memory) asked of a device after its Close: the cpu device, and
// the CUDA device (runtime/cuda), whose streams' copies, memsets, events,
// waits and synchronizations after Close give it too (kernel launches and
// graph replays are the backend's, which does not outlive its device).
var ErrDeviceClosed = errors.New("device closed (used after Close)")

// Accountant keeps MemStats for a device's pool; backends embed it.
type Accountant struct {
	mu    sync.Mutex
	stats MemStats
	name  string
}

// NewAccountant returns accounting for a pool with the given limit (0 = none);
// name appears in errors ("cpu device memory").
func NewAccountant(name string, limit int64) *Accountant {
	return &Accountant{name: name, stats: MemStats{Limit: limit}}
}

// Reserve takes n bytes or fails with an error naming the allocation, its size
// and the pool's state.
func (a *Accountant) Reserve(n int64, label string) error {
	if n < 0 {
		return fmt.Errorf("%s: allocation %q of %d bytes: negative size", a.name, label, n)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stats.Limit > 0 && a.stats.InUse+n > a.stats.Limit {
		return fmt.Errorf("%s: allocation %q of %s: %w (%s in use of %s limit)",
			a.name, label, FormatBytes(n), ErrOutOfMemory, FormatBytes(a.stats.InUse), FormatBytes(a.stats.Limit))
	}
	a.stats.InUse += n
	a.stats.Count++
	if a.stats.InUse > a.stats.Peak {
		a.stats.Peak = a.stats.InUse
	}
	return nil
}

// Release returns n bytes.
func (a *Accountant) Release(n int64) {
	a.mu.Lock()
	a.stats.InUse -= n
	a.stats.Count--
	a.mu.Unlock()
}

// Stats returns a snapshot.
func (a *Accountant) Stats() MemStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats
}

// SetLimit changes the limit (0 = none); it does not free anything.
func (a *Accountant) SetLimit(limit int64) {
	a.mu.Lock()
	a.stats.Limit = limit
	a.mu.Unlock()
}

// ResetPeak sets the peak to the bytes in use now.
func (a *Accountant) ResetPeak() {
	a.mu.Lock()
	a.stats.Peak = a.stats.InUse
	a.mu.Unlock()
}

// DeviceBuffer is a block of device memory. On the CPU device its bytes are
// addressable from Go (Bytes); on a GPU it has a device address (Ptr).
type DeviceBuffer struct {
	dev   Device
	size  int64
	label string
	data  []byte
	ptr   uintptr
	free  func()
	freed atomic.Bool
}

// NewDeviceBuffer is for backends: it wraps memory a device allocated. data is
// set for host-addressable devices, ptr for GPUs; free returns the memory
// (called once, by Free).
func NewDeviceBuffer(dev Device, size int64, label string, data []byte, ptr uintptr, free func()) *DeviceBuffer {
	return &DeviceBuffer{dev: dev, size: size, label: label, data: data, ptr: ptr, free: free}
}

// Device is the buffer's owner.
func (b *DeviceBuffer) Device() Device { return b.dev }

// Size is the buffer's length in bytes.
func (b *DeviceBuffer) Size() int64 { return b.size }

// Label names the allocation.
func (b *DeviceBuffer) Label() string { return b.label }

// Bytes is the memory itself on host-addressable devices (cpu); nil elsewhere.
func (b *DeviceBuffer) Bytes() []byte { return b.data }

// Ptr is the device address on a GPU; 0 elsewhere.
func (b *DeviceBuffer) Ptr() uintptr { return b.ptr }

// Freed reports whether Free has run.
func (b *DeviceBuffer) Freed() bool { return b.freed.Load() }

// Free returns the memory to its device. A second Free is a no-op.
func (b *DeviceBuffer) Free() {
	if b == nil || !b.freed.CompareAndSwap(false, true) {
		return
	}
	if b.free != nil {
		b.free()
	}
	b.data = nil
}

// HostBuffer is host memory a device copies from and to (page-locked on a
// GPU). Its bytes are always addressable from Go.
type HostBuffer struct {
	dev   Device
	size  int64
	label string
	data  []byte
	free  func()
	freed atomic.Bool
}

// NewHostBuffer is for backends: it wraps host memory a device allocated.
func NewHostBuffer(dev Device, label string, data []byte, free func()) *HostBuffer {
	return &HostBuffer{dev: dev, size: int64(len(data)), label: label, data: data, free: free}
}

// Device is the buffer's owner.
func (b *HostBuffer) Device() Device { return b.dev }

// Size is the buffer's length in bytes.
func (b *HostBuffer) Size() int64 { return b.size }

// Label names the allocation.
func (b *HostBuffer) Label() string { return b.label }

// Bytes is the memory.
func (b *HostBuffer) Bytes() []byte { return b.data }

// Free returns the memory. A second Free is a no-op.
func (b *HostBuffer) Free() {
	if b == nil || !b.freed.CompareAndSwap(false, true) {
		return
	}
	if b.free != nil {
		b.free()
	}
	b.data = nil
}

// CheckRange returns an error unless [off, off+n) lies inside a buffer of size.
func CheckRange(what string, off, n, size int64) error {
	if off < 0 || n < 0 || off+n > size {
		return fmt.Errorf("%s: range [%d, %d) outside buffer of %d bytes", what, off, off+n, size)
	}
	return nil
}

// FormatBytes prints a byte count with a binary unit ("1.50 GiB").
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	f := float64(n)
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		f /= unit
		if f < unit && f > -unit {
			return fmt.Sprintf("%.2f %s", f, u)
		}
	}
	return fmt.Sprintf("%.2f PiB", f/unit)
}
