package runtime

// MappedHostDevice is a device whose kernels can read host memory in place:
// page-locked host memory mapped into the device's address space (CUDA's
// device-mapped pinned memory; on the CPU device, ordinary host memory).
// The offload engine keeps a gather-only embedding table there when the
// model's weights do not all fit the device budget, so that the gigabyte a
// large vocabulary takes (Llama 3: 128256 x 4096 bf16) holds layers instead;
// a decode step reads one row of it across the bus. Found by type
// assertion, like the capabilities in capability.go: a device without it
// keeps such tables in device memory.
type MappedHostDevice interface {
	Device
	// AllocMapped takes bytes of page-locked host memory mapped for the
	// device. host is the memory as Go addresses it (the caller fills it
	// before kernels read it); buf is the same memory as a buffer of this
	// device, for tensors the device's kernels accept (its Ptr is the
	// device address on a GPU; its Bytes is nil there, since the buffer
	// does not hold device memory a host copy could replace). buf.Free
	// releases both. The bytes count in HostMemory, not in Memory: they
	// take no device memory.
	AllocMapped(bytes int64, label string) (buf *DeviceBuffer, host []byte, err error)
}

// AllocMapped takes host memory accounted as this device's host memory
// (HostMemory) and returns it as a device buffer: the CPU device's kernels
// read host memory anyway, so the mapping is the identity.
func (d *CPUDevice) AllocMapped(bytes int64, label string) (*DeviceBuffer, []byte, error) {
	if err := d.host.Reserve(bytes, label); err != nil {
		return nil, nil, err
	}
	data := make([]byte, bytes)
	return NewDeviceBuffer(d, bytes, label, data, 0, func() { d.host.Release(bytes) }), data, nil
}

var _ MappedHostDevice = (*CPUDevice)(nil)
