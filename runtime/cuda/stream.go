//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	goruntime "runtime"
	"time"
	"unsafe"

	"github.com/flextensor-go/flextensor/runtime"
)

// Stream is a non-blocking CUDA stream: copies, memsets, kernels and graphs
// enqueued on it run in order, asynchronously to the host.
type Stream struct {
	dev   *Device
	s     cStream
	name  string
	owned bool // made by NewStream (Close destroys it); the compute stream belongs to the device
}

// Device is the stream's device.
func (s *Stream) Device() *Device { return s.dev }

func (s *Stream) op(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s stream %q: %s: %w", s.dev.Name(), s.name, what, err)
}

// live is nil, or, after the device's Close (its streams destroyed), an
// error naming the operation that wraps runtime.ErrDeviceClosed.
func (s *Stream) live(what string) error {
	if s.dev.closed.Load() {
		return s.dev.errClosed(what+" on stream", s.name)
	}
	return nil
}

func (s *Stream) copyRanges(what string, dstOff, dstSize, srcOff, srcSize, n int64) error {
	if err := runtime.CheckRange(what+" destination", dstOff, n, dstSize); err != nil {
		return err
	}
	return runtime.CheckRange(what+" source", srcOff, n, srcSize)
}

// CopyH2D enqueues dst[dstOff:dstOff+n] = src[srcOff:srcOff+n]; src must be
// pinned memory of this device (AllocHost) and stay untouched until the copy
// has run (record an event after it).
func (s *Stream) CopyH2D(dst *runtime.DeviceBuffer, dstOff int64, src *runtime.HostBuffer, srcOff, n int64) error {
	if err := s.live("H2D copy"); err != nil {
		return err
	}
	if err := s.dev.own("H2D destination", dst); err != nil {
		return err
	}
	if err := s.dev.ownHost("H2D source", src); err != nil {
		return err
	}
	if err := s.copyRanges("H2D copy", dstOff, dst.Size(), srcOff, src.Size(), n); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	p := unsafe.Pointer(&src.Bytes()[srcOff])
	return s.op(fmt.Sprintf("H2D copy of %s into %q", runtime.FormatBytes(n), dst.Label()),
		check("cuMemcpyHtoDAsync", cH2D(s.dev.ctx, dst.Ptr()+uintptr(dstOff), p, n, s.s)))
}

// CopyD2H enqueues dst[dstOff:dstOff+n] = src[srcOff:srcOff+n] into pinned
// memory of this device.
func (s *Stream) CopyD2H(dst *runtime.HostBuffer, dstOff int64, src *runtime.DeviceBuffer, srcOff, n int64) error {
	if err := s.live("D2H copy"); err != nil {
		return err
	}
	if err := s.dev.ownHost("D2H destination", dst); err != nil {
		return err
	}
	if err := s.dev.own("D2H source", src); err != nil {
		return err
	}
	if err := s.copyRanges("D2H copy", dstOff, dst.Size(), srcOff, src.Size(), n); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	p := unsafe.Pointer(&dst.Bytes()[dstOff])
	return s.op(fmt.Sprintf("D2H copy of %s from %q", runtime.FormatBytes(n), src.Label()),
		check("cuMemcpyDtoHAsync", cD2H(s.dev.ctx, p, src.Ptr()+uintptr(srcOff), n, s.s)))
}

// CopyD2D enqueues a device-to-device copy.
func (s *Stream) CopyD2D(dst *runtime.DeviceBuffer, dstOff int64, src *runtime.DeviceBuffer, srcOff, n int64) error {
	if err := s.live("D2D copy"); err != nil {
		return err
	}
	if err := s.dev.own("D2D destination", dst); err != nil {
		return err
	}
	if err := s.dev.own("D2D source", src); err != nil {
		return err
	}
	if err := s.copyRanges("D2D copy", dstOff, dst.Size(), srcOff, src.Size(), n); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	return s.op(fmt.Sprintf("D2D copy of %s", runtime.FormatBytes(n)),
		check("cuMemcpyDtoDAsync", cD2D(s.dev.ctx, dst.Ptr()+uintptr(dstOff), src.Ptr()+uintptr(srcOff), n, s.s)))
}

// Upload copies src (any host memory) to device address dst, waiting for the
// stream first and for the copy after: a convenience for tests and small
// tables, not for the hot path.
func (s *Stream) Upload(dst uintptr, src []byte) error {
	if err := s.live("upload"); err != nil {
		return err
	}
	return s.op(fmt.Sprintf("upload of %d bytes", len(src)), check("cuMemcpyHtoDAsync", cH2DSync(s.dev.ctx, dst, src, s.s)))
}

// Download copies len(dst) bytes from device address src into dst once the
// work enqueued before it has run.
func (s *Stream) Download(dst []byte, src uintptr) error {
	if err := s.live("download"); err != nil {
		return err
	}
	return s.op(fmt.Sprintf("download of %d bytes", len(dst)), check("cuMemcpyDtoHAsync", cD2HSync(s.dev.ctx, dst, src, s.s)))
}

// MemsetD16 enqueues n 16-bit stores of v at device address dst.
func (s *Stream) MemsetD16(dst uintptr, v uint16, n int64) error {
	if err := s.live("memset"); err != nil {
		return err
	}
	return s.op("memset", check("cuMemsetD16Async", cMemset16(s.dev.ctx, dst, v, n, s.s)))
}

// MemsetD32 enqueues n 32-bit stores of v at device address dst.
func (s *Stream) MemsetD32(dst uintptr, v uint32, n int64) error {
	if err := s.live("memset"); err != nil {
		return err
	}
	return s.op("memset", check("cuMemsetD32Async", cMemset32(s.dev.ctx, dst, v, n, s.s)))
}

// Record returns an event that completes when all work enqueued so far has.
func (s *Stream) Record() (runtime.Event, error) { return s.RecordEvent() }

// RecordEvent is Record returning the concrete type.
func (s *Stream) RecordEvent() (*Event, error) {
	if err := s.live("event"); err != nil {
		return nil, err
	}
	h, err := s.dev.eventHandle()
	if err != nil {
		return nil, s.op("event", err)
	}
	if err := cEventRecord(s.dev.ctx, h, s.s); err != nil {
		s.dev.recycleEvent(h)
		return nil, s.op("event", err)
	}
	e := &Event{dev: s.dev, e: h}
	d := s.dev
	goruntime.AddCleanup(e, func(h cEvent) { d.recycleEvent(h) }, h)
	return e, nil
}

// Wait makes work enqueued later wait for e (an event of this device).
func (s *Stream) Wait(e runtime.Event) error {
	if err := s.live("wait"); err != nil {
		return err
	}
	ce, ok := e.(*Event)
	if !ok || ce == nil {
		return fmt.Errorf("%s stream %q: cannot wait on an event of type %T", s.dev.Name(), s.name, e)
	}
	if ce.dev != s.dev {
		return fmt.Errorf("%s stream %q: event of %s", s.dev.Name(), s.name, ce.dev.Name())
	}
	err := cStreamWait(s.dev.ctx, s.s, ce.e)
	goruntime.KeepAlive(ce)
	return s.op("wait", err)
}

// Synchronize blocks until all enqueued work is done; an error of that work
// (CUDA errors are sticky per context) is returned.
func (s *Stream) Synchronize() error {
	if err := s.live("synchronize"); err != nil {
		return err
	}
	return s.op("synchronize", check("cuStreamSynchronize", cStreamSync(s.dev.ctx, s.s)))
}

// Close drains the stream and destroys it (the compute stream lives until the
// device closes).
func (s *Stream) Close() error {
	if !s.owned {
		return nil
	}
	s.dev.mu.Lock()
	if s.s == nil {
		s.dev.mu.Unlock()
		return nil
	}
	h := s.s
	s.s = nil
	for i, o := range s.dev.streams {
		if o == s {
			s.dev.streams = append(s.dev.streams[:i], s.dev.streams[i+1:]...)
			break
		}
	}
	s.dev.mu.Unlock()
	err := check("cuStreamSynchronize", cStreamSync(s.dev.ctx, h))
	return errors.Join(s.op("close", err), s.op("close", cStreamDestroy(s.dev.ctx, h)))
}

// Event is a CUDA event (with timing). Its handle returns to the device's
// pool once the Event is unreachable.
type Event struct {
	dev *Device
	e   cEvent
}

// Synchronize blocks until the event has completed.
func (e *Event) Synchronize() error {
	err := check("cuEventSynchronize", cEventSync(e.dev.ctx, e.e))
	goruntime.KeepAlive(e)
	if err != nil {
		return fmt.Errorf("%s: %w", e.dev.Name(), err)
	}
	return nil
}

// Done reports whether the event has completed, without blocking.
func (e *Event) Done() bool {
	r := cEventQuery(e.dev.ctx, e.e)
	goruntime.KeepAlive(e)
	return r != notReady
}

// ElapsedSince is the device time from start to this event (both completed,
// both of this device), with the resolution of cuEventElapsedTime (about
// half a microsecond).
func (e *Event) ElapsedSince(start runtime.Event) (time.Duration, error) {
	s, ok := start.(*Event)
	if !ok || s == nil {
		return 0, fmt.Errorf("%s event: ElapsedSince an event of type %T", e.dev.Name(), start)
	}
	ms, err := cEventElapsed(e.dev.ctx, s.e, e.e)
	goruntime.KeepAlive(e)
	goruntime.KeepAlive(s)
	if err != nil {
		return 0, fmt.Errorf("%s event: %w", e.dev.Name(), err)
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}
