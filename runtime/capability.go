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
