package runtime

import (
	"errors"
	"fmt"
)

// MetaDevice holds shapes and dtypes only: its buffers have a size and no
// storage, so a model can be built on it to learn its parameters' names,
// shapes and bytes before any weight is read.
type MetaDevice struct{ mem *Accountant }

// NewMeta returns a meta device. Its byte accounting counts what a model built
// on it would take.
func NewMeta() *MetaDevice { return &MetaDevice{mem: NewAccountant("meta device", 0)} }

// errNoStorage is returned by every operation that would touch data.
var errNoStorage = errors.New("meta device: tensors on the meta device have no storage")

// Name is "meta".
func (d *MetaDevice) Name() string { return "meta" }

// Kind is KindMeta.
func (d *MetaDevice) Kind() DeviceKind { return KindMeta }

// Alloc returns a buffer of the given size with no storage.
func (d *MetaDevice) Alloc(bytes int64, label string) (*DeviceBuffer, error) {
	if err := d.mem.Reserve(bytes, label); err != nil {
		return nil, err
	}
	return NewDeviceBuffer(d, bytes, label, nil, 0, func() { d.mem.Release(bytes) }), nil
}

// AllocHost is an error: the meta device has no memory.
func (d *MetaDevice) AllocHost(bytes int64, label string) (*HostBuffer, error) {
	return nil, fmt.Errorf("allocation %q: %w", label, errNoStorage)
}

// Memory reports the bytes its buffers stand for.
func (d *MetaDevice) Memory() MemStats { return d.mem.Stats() }

// HostMemory is always zero.
func (d *MetaDevice) HostMemory() MemStats { return MemStats{} }

// Compute returns a stream whose every operation fails.
func (d *MetaDevice) Compute() Stream { return metaStream{} }

// NewStream returns a stream whose every operation fails.
func (d *MetaDevice) NewStream(string) (Stream, error) { return metaStream{}, nil }

// Close does nothing.
func (d *MetaDevice) Close() error { return nil }

type metaStream struct{}

func (metaStream) CopyH2D(*DeviceBuffer, int64, *HostBuffer, int64, int64) error { return errNoStorage }
func (metaStream) CopyD2H(*HostBuffer, int64, *DeviceBuffer, int64, int64) error { return errNoStorage }
func (metaStream) CopyD2D(*DeviceBuffer, int64, *DeviceBuffer, int64, int64) error {
	return errNoStorage
}
func (metaStream) Record() (Event, error) { return nil, errNoStorage }
func (metaStream) Wait(Event) error       { return errNoStorage }
func (metaStream) Synchronize() error     { return nil }
func (metaStream) Close() error           { return nil }
