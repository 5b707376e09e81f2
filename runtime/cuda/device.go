//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"os"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/flextensor-go/flextensor/runtime"
	_ "github.com/flextensor-go/flextensor/runtime/cuda/internal/probe" // a clear message before gorgonia.org/cu's init exits on a bad driver
	"github.com/flextensor-go/flextensor/runtime/hostmem"
	"github.com/flextensor-go/flextensor/runtime/kernelcache"
)

// Device is one NVIDIA GPU: device memory through cuMemAlloc with byte
// accounting and an optional limit, pinned host memory through
// cuMemHostAlloc, a compute stream and more streams on request (all
// non-blocking CUDA streams), events with timing, NVRTC modules, cuBLAS and
// CUDA graphs. It uses the device's primary context. Its methods may be called
// from any goroutine.
type Device struct {
	index      int
	name       string
	cc         int // compute capability, major*10 + minor
	sms        int
	totalMem   int64
	cuDev      cu.Device
	dev        cDevice
	ctx        cContext
	mem, host  *runtime.Accountant
	compute    *Stream
	mu         sync.Mutex
	streams    []*Stream
	modules    []*Module
	blas       []*BLAS
	freeEvents []cEvent // recycled by the cleanups of unreachable events
	atClose    []func() error
	closed     atomic.Bool                   // set by Close (under mu); allocations and copies read it without mu
	kcache     *kernelcache.Cache            // compiled modules on disk
	kprof      atomic.Pointer[kernelProfile] // set while a kernel profile runs (kprofile.go)
	pdl        atomic.Bool                   // programmatic dependent launch on (pdl.go)
}

var initOnce = sync.OnceValue(cInit)

// Open opens GPU index (0-based) with no memory limit but the card's.
func Open(index int) (*Device, error) { return OpenWith(index, Options{}) }

// OpenWith opens GPU index with options.
func OpenWith(index int, o Options) (*Device, error) {
	if err := initOnce(); err != nil {
		return nil, fmt.Errorf("cuda:%d: the CUDA driver could not be initialised: %w", index, err)
	}
	n, err := cu.NumDevices()
	if err != nil {
		return nil, fmt.Errorf("cuda:%d: counting devices: %w", index, err)
	}
	if index < 0 || index >= n {
		return nil, fmt.Errorf("cuda:%d: no such device (%d CUDA device(s) present)", index, n)
	}
	if o.MemoryLimit < 0 {
		return nil, fmt.Errorf("cuda:%d: memory limit %d is negative", index, o.MemoryLimit)
	}
	cd, err := cu.GetDevice(index)
	if err != nil {
		return nil, fmt.Errorf("cuda:%d: %w", index, err)
	}
	d := &Device{index: index, cuDev: cd, kcache: o.KernelCache}
	if d.kcache == nil {
		d.kcache = kernelcache.Default()
	}
	if d.name, err = cd.Name(); err != nil {
		return nil, fmt.Errorf("cuda:%d: device name: %w", index, err)
	}
	major, err1 := cd.Attribute(cu.ComputeCapabilityMajor)
	minor, err2 := cd.Attribute(cu.ComputeCapabilityMinor)
	sms, err3 := cd.Attribute(cu.MultiprocessorCount)
	total, err4 := cd.TotalMem()
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return nil, fmt.Errorf("cuda:%d: device attributes: %w", index, err)
	}
	d.cc, d.sms, d.totalMem = major*10+minor, sms, total
	if d.cc < 80 {
		return nil, fmt.Errorf("cuda:%d: %s has compute capability %d.%d; the kernels need 8.0 or newer (bf16 tensor cores)", index, d.name, major, minor)
	}
	// FT_CUDA_SCHED: how threads wait for this GPU (sched.go), set
	// before the primary context is retained (it applies when the context
	// is made; one already active keeps its flags until it is reset).
	sched, setSched, err := schedFromEnv()
	if err != nil {
		return nil, fmt.Errorf("cuda:%d: %w", index, err)
	}
	oldFlags, flags, active, err := cPrimarySched(index, sched, setSched)
	if err != nil {
		return nil, fmt.Errorf("cuda:%d: %w", index, err)
	}
	if setSched && os.Getenv("FT_TRACE") == "1" {
		state := "not yet active: the flags apply"
		if active {
			state = "already active: it keeps the flags it was made with until released by all"
		}
		fmt.Fprintf(os.Stderr, "cuda:%d: %s=%s: primary context flags %#x -> %#x (context %s)\n", index, SchedEnv, os.Getenv(SchedEnv), oldFlags, flags, state)
	}
	if d.dev, d.ctx, err = cPrimaryContext(index); err != nil {
		return nil, fmt.Errorf("cuda:%d: %w", index, err)
	}
	d.mem = runtime.NewAccountant(fmt.Sprintf("cuda:%d device memory", index), o.MemoryLimit)
	d.host = runtime.NewAccountant(fmt.Sprintf("cuda:%d pinned host memory", index), 0)
	s, err := cStreamCreate(d.ctx)
	if err != nil {
		cReleasePrimary(d.dev)
		return nil, fmt.Errorf("cuda:%d: compute stream: %w", index, err)
	}
	d.compute = &Stream{dev: d, s: s, name: "compute"}
	d.initPDL()
	return d, nil
}

// Name is "cuda:N".
func (d *Device) Name() string { return fmt.Sprintf("cuda:%d", d.index) }

// Kind is KindCUDA.
func (d *Device) Kind() runtime.DeviceKind { return runtime.KindCUDA }

// Index is the device's ordinal.
func (d *Device) Index() int { return d.index }

// Model is the GPU's name as the driver reports it ("NVIDIA H200").
func (d *Device) Model() string { return d.name }

// ComputeCapability is major*10 + minor (90 on Hopper).
func (d *Device) ComputeCapability() int { return d.cc }

// Multiprocessors is the number of streaming multiprocessors.
func (d *Device) Multiprocessors() int { return d.sms }

// TotalMemory is the card's memory in bytes.
func (d *Device) TotalMemory() int64 { return d.totalMem }

// DriverVersion is the CUDA version the driver supports (13000 = 13.0).
func (d *Device) DriverVersion() int { return driverVersion() }

// Memory reports the device pool (what Alloc took, not other processes').
func (d *Device) Memory() runtime.MemStats { return d.mem.Stats() }

// HostMemory reports the pinned host memory taken through AllocHost.
func (d *Device) HostMemory() runtime.MemStats { return d.host.Stats() }

// SetMemoryLimit changes the device pool's limit (0 = only the card's).
func (d *Device) SetMemoryLimit(limit int64) { d.mem.SetLimit(limit) }

// ResetPeak sets the device pool's peak to its bytes in use.
func (d *Device) ResetPeak() { d.mem.ResetPeak() }

// FreeMemory is the card's free memory as the driver reports it.
func (d *Device) FreeMemory() (free, total int64, err error) {
	err = d.withCtx(func() error {
		var e error
		free, total, e = cu.MemInfo()
		return e
	})
	return free, total, err
}

// withCtx runs f on a locked OS thread with the device's context current, for
// gorgonia.org/cu calls, which use the calling thread's context.
func (d *Device) withCtx(f func() error) error {
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	if err := cSetCurrent(d.ctx); err != nil {
		return err
	}
	return f()
}

// Alloc takes device memory (contents undefined). Failures name the
// allocation and its size; running out of memory, whether by the limit or on
// the card, wraps runtime.ErrOutOfMemory.
func (d *Device) Alloc(bytes int64, label string) (*runtime.DeviceBuffer, error) {
	if d.closed.Load() {
		return nil, d.errClosed("allocation", label)
	}
	if err := d.mem.Reserve(bytes, label); err != nil {
		return nil, err
	}
	n := max(bytes, 1) // cuMemAlloc refuses 0 bytes
	var p cu.DevicePtr
	err := d.withCtx(func() error {
		var e error
		p, e = cu.MemAlloc(n)
		return e
	})
	if err != nil {
		d.mem.Release(bytes)
		if err == cu.OutOfMemory {
			free, _, _ := d.FreeMemory()
			st := d.mem.Stats()
			return nil, fmt.Errorf("%s: allocation %q of %s: %w (cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY; %s free on the card, %s held by this process)",
				d.Name(), label, runtime.FormatBytes(bytes), runtime.ErrOutOfMemory, runtime.FormatBytes(free), runtime.FormatBytes(st.InUse))
		}
		return nil, fmt.Errorf("%s: allocation %q of %s: cuMemAlloc: %v", d.Name(), label, runtime.FormatBytes(bytes), err)
	}
	ptr := uintptr(p)
	return runtime.NewDeviceBuffer(d, bytes, label, nil, ptr, func() {
		if err := d.withCtx(func() error { return cu.MemFree(cu.DevicePtr(ptr)) }); err != nil {
			// Only a broken context makes cuMemFree fail; the bytes are lost
			// either way, so the accounting still releases them.
			fmt.Fprintf(os.Stderr, "flextensor: %s: cuMemFree of %q: %v\n", d.Name(), label, err)
		}
		d.mem.Release(bytes)
	}), nil
}

// AllocHost takes page-locked (pinned) host memory through cuMemHostAlloc
// (portable across contexts; contents undefined), so that copies to and from
// the device run at full speed and asynchronously.
//
// Blocks of 4 MiB and more are mapped by the process instead (anonymous,
// transparent huge pages requested), faulted in on all cores, and only then
// page-locked with cuMemHostRegister: on the H200 machine that pinned 8.3 GB
// in 0.56 s where cuMemHostAlloc, which the driver serialises, took 3.6 s
// (bench/RESULTS.md). FT_PINNED=alloc selects cuMemHostAlloc for every size.
func (d *Device) AllocHost(bytes int64, label string) (*runtime.HostBuffer, error) {
	if d.closed.Load() {
		return nil, d.errClosed("pinned host allocation", label)
	}
	if err := d.host.Reserve(bytes, label); err != nil {
		return nil, err
	}
	if os.Getenv("FT_PINNED") != "alloc" && bytes >= 4<<20 {
		return d.allocRegistered(bytes, label)
	}
	p, r := cHostAlloc(d.ctx, max(bytes, 1))
	if err := check("cuMemHostAlloc", r); err != nil {
		d.host.Release(bytes)
		return nil, fmt.Errorf("%s: pinned host allocation %q of %s: %w", d.Name(), label, runtime.FormatBytes(bytes), err)
	}
	data := unsafe.Slice((*byte)(p), bytes)
	return runtime.NewHostBuffer(d, label, data, func() {
		if err := cHostFree(d.ctx, p); err != nil {
			fmt.Fprintf(os.Stderr, "flextensor: %s: freeing pinned %q: %v\n", d.Name(), label, err)
		}
		d.host.Release(bytes)
	}), nil
}

// Compute is the stream kernels run on (a *Stream).
func (d *Device) Compute() runtime.Stream { return d.compute }

// ComputeStream is Compute as its concrete type.
func (d *Device) ComputeStream() *Stream { return d.compute }

// NewStream makes a non-blocking CUDA stream of its own.
func (d *Device) NewStream(name string) (runtime.Stream, error) { return d.NewCUDAStream(name) }

// NewCUDAStream is NewStream returning the concrete type.
func (d *Device) NewCUDAStream(name string) (*Stream, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed.Load() {
		return nil, d.errClosed("stream", name)
	}
	s, err := cStreamCreate(d.ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: stream %q: %w", d.Name(), name, err)
	}
	st := &Stream{dev: d, s: s, name: name, owned: true}
	d.streams = append(d.streams, st)
	return st, nil
}

// Synchronize waits for all work on the device.
func (d *Device) Synchronize() error {
	if err := cCtxSync(d.ctx); err != nil {
		return fmt.Errorf("%s: %w", d.Name(), err)
	}
	return nil
}

// Close waits for the device's work, destroys its streams, modules, cuBLAS
// handles and pooled events, and releases the primary context. Device or
// pinned bytes still held are reported as an error (they are the caller's
// leaks; the memory itself goes with the context only when the process ends).
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed.Load() {
		d.mu.Unlock()
		return nil
	}
	hooks := d.atClose
	d.atClose = nil
	d.mu.Unlock()
	var errs []error
	for i := len(hooks) - 1; i >= 0; i-- {
		errs = append(errs, hooks[i]())
	}
	d.mu.Lock()
	d.closed.Store(true)
	streams, modules, blas, events := d.streams, d.modules, d.blas, d.freeEvents
	d.streams, d.modules, d.blas, d.freeEvents = nil, nil, nil, nil
	d.mu.Unlock()
	if err := d.Synchronize(); err != nil {
		errs = append(errs, err)
	}
	for _, b := range blas {
		errs = append(errs, b.close())
	}
	for _, s := range streams {
		errs = append(errs, s.Close())
	}
	errs = append(errs, cStreamDestroy(d.ctx, d.compute.s))
	for _, m := range modules {
		errs = append(errs, m.unload())
	}
	for _, e := range events {
		errs = append(errs, cEventDestroy(d.ctx, e))
	}
	if m := d.mem.Stats(); m.InUse != 0 {
		errs = append(errs, fmt.Errorf("%s: closed with %s of device memory in %d allocations still held", d.Name(), runtime.FormatBytes(m.InUse), m.Count))
	}
	if m := d.host.Stats(); m.InUse != 0 {
		errs = append(errs, fmt.Errorf("%s: closed with %s of pinned host memory in %d allocations still held", d.Name(), runtime.FormatBytes(m.InUse), m.Count))
	}
	if m := d.mem.Stats(); m.InUse == 0 {
		// Releasing the primary context with memory still allocated would free
		// it under the caller's buffers: keep the context then.
		errs = append(errs, cReleasePrimary(d.dev))
	}
	return errors.Join(errs...)
}

// errClosed is what an allocation, a stream or a copy asked of the device
// after its Close gives: an error naming op and label that wraps
// runtime.ErrDeviceClosed (the streams are destroyed by then, and the
// context released unless memory was still held).
func (d *Device) errClosed(op, label string) error {
	return fmt.Errorf("%s: %s %q: %w", d.Name(), op, label, runtime.ErrDeviceClosed)
}

// AtClose registers f to run first thing in Close, last registered first:
// users of the device that hold memory of their own (the CUDA kernels
// backend's scratch) free it there, so Close finds nothing leaked.
func (d *Device) AtClose(f func() error) {
	d.mu.Lock()
	d.atClose = append(d.atClose, f)
	d.mu.Unlock()
}

// own reports an error unless b is device memory of this device.
func (d *Device) own(what string, b *runtime.DeviceBuffer) error {
	if b == nil {
		return fmt.Errorf("%s: %s buffer is nil", d.Name(), what)
	}
	if b.Device() != runtime.Device(d) {
		return fmt.Errorf("%s: %s buffer %q belongs to %s", d.Name(), what, b.Label(), deviceName(b.Device()))
	}
	if b.Freed() {
		return fmt.Errorf("%s: %s buffer %q was freed", d.Name(), what, b.Label())
	}
	return nil
}

func (d *Device) ownHost(what string, b *runtime.HostBuffer) error {
	if b == nil {
		return fmt.Errorf("%s: %s host buffer is nil", d.Name(), what)
	}
	if b.Device() != runtime.Device(d) {
		return fmt.Errorf("%s: %s host buffer %q belongs to %s (async copies need pinned memory from this device's AllocHost)", d.Name(), what, b.Label(), deviceName(b.Device()))
	}
	if b.Bytes() == nil && b.Size() > 0 {
		return fmt.Errorf("%s: %s host buffer %q was freed", d.Name(), what, b.Label())
	}
	return nil
}

func deviceName(d runtime.Device) string {
	if d == nil {
		return "<nil>"
	}
	return d.Name()
}

// eventHandle takes a pooled event or creates one.
func (d *Device) eventHandle() (cEvent, error) {
	d.mu.Lock()
	if n := len(d.freeEvents); n > 0 {
		e := d.freeEvents[n-1]
		d.freeEvents = d.freeEvents[:n-1]
		d.mu.Unlock()
		return e, nil
	}
	d.mu.Unlock()
	return cEventCreate(d.ctx)
}

// recycleEvent returns an unreachable event's handle to the pool.
func (d *Device) recycleEvent(e cEvent) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed.Load() {
		return // the context's teardown takes it
	}
	d.freeEvents = append(d.freeEvents, e)
}

// pinnedHuge: the pinned blocks AllocHost maps are 2 MiB-aligned and
// collapsed onto huge pages (runtime/hostmem); FT_PINNED_HUGE=0 maps them
// as before (unaligned, MADV_HUGEPAGE only), for A/B runs. Read once.
var pinnedHuge = hostmem.PinnedHuge()

// allocRegistered maps anonymous memory on huge pages (runtime/hostmem:
// 2 MiB-aligned, MADV_HUGEPAGE before it is faulted in on all cores,
// MADV_COLLAPSE after) and page-locks it. The bytes are already reserved.
// A collapse that failed for a reason worth knowing is an FT_TRACE line,
// not an error: the block works on whatever pages it has.
func (d *Device) allocRegistered(bytes int64, label string) (*runtime.HostBuffer, error) {
	fail := func(err error) (*runtime.HostBuffer, error) {
		d.host.Release(bytes)
		return nil, fmt.Errorf("%s: pinned host allocation %q of %s: %w", d.Name(), label, runtime.FormatBytes(bytes), err)
	}
	blk, err := hostmem.Map(bytes, hostmem.Options{Huge: pinnedHuge})
	if err != nil {
		return fail(err)
	}
	if blk.CollapseErr != nil && os.Getenv("FT_TRACE") == "1" {
		fmt.Fprintf(os.Stderr, "trace: %s: pinned %q of %s: %v (kept on the pages it has)\n", d.Name(), label, runtime.FormatBytes(bytes), blk.CollapseErr)
	}
	data := blk.Bytes()
	p := unsafe.Pointer(&data[0])
	if err := cHostRegister(d.ctx, p, bytes); err != nil {
		blk.Free()
		return fail(err)
	}
	return runtime.NewHostBuffer(d, label, data, func() {
		if err := cHostUnregister(d.ctx, p); err != nil {
			fmt.Fprintf(os.Stderr, "flextensor: %s: unregistering pinned %q: %v\n", d.Name(), label, err)
		}
		if err := blk.Free(); err != nil {
			fmt.Fprintf(os.Stderr, "flextensor: %s: unmapping pinned %q: %v\n", d.Name(), label, err)
		}
		d.host.Release(bytes)
	}), nil
}
