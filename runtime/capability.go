package runtime

// The optional capabilities of a Device, found by type assertion. Code that
// places data on a device (package place) decides how by these, never by a
// device's concrete type; a device with none of them (a GPU) gets the general
// path: device memory filled by copies from host staging buffers.

// HostMemoryDevice is a device whose device memory is ordinary host memory
// (the CPU device). Its buffers' Bytes are addressable from Go, and Wrap
// accounts bytes that already exist (an mmapped checkpoint) as device memory
// without copying them.
type HostMemoryDevice interface {
	Device
	// Wrap accounts data as a device buffer; Free releases the accounting,
	// the memory stays the caller's.
	Wrap(data []byte, label string) (*DeviceBuffer, error)
}

// StoragelessDevice is a device whose buffers have a size and no storage
// (the meta device): placing data there allocates sizes and copies nothing.
type StoragelessDevice interface {
	Device
	// Storageless reports whether the device's buffers lack storage.
	Storageless() bool
}

// Storageless is true: meta buffers have a size and no bytes.
func (d *MetaDevice) Storageless() bool { return true }

var (
	_ HostMemoryDevice  = (*CPUDevice)(nil)
	_ StoragelessDevice = (*MetaDevice)(nil)
)

// KernelRecord is one kernel launch timed by a kernel profile.
type KernelRecord struct {
	Name  string  // the kernel (or library call) name
	Bytes int64   // bytes the launch site says the kernel reads and writes; 0 when it does not say
	Ms    float64 // device time from just before the kernel to just after it
}

// KernelProfiler is a device that can time every kernel it launches, each
// between two events on its stream: a per-kernel table of one forward. The
// events serialise nothing that a stream does not already serialise, but
// they cost a little each, so a profiled forward is a bit slower than an
// unprofiled one; graph replays are not broken down.
type KernelProfiler interface {
	Device
	// StartKernelProfile begins recording; an error if one is running.
	StartKernelProfile() error
	// StopKernelProfile waits for the recorded kernels and returns them in
	// launch order.
	StopKernelProfile() ([]KernelRecord, error)
}
