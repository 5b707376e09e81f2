//go:build cuda

package cuda

import (
	"fmt"
	"os"
	"unsafe"

	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/hostmem"
)

// AllocMapped takes page-locked host memory mapped into the device's address
// space (runtime.MappedHostDevice): anonymous memory on huge pages
// (runtime/hostmem, as AllocHost's large blocks), registered with
// cuMemHostRegister(PORTABLE|DEVICEMAP); the buffer's Ptr is its address from
// cuMemHostGetDevicePointer, which kernels (and CUDA graphs) read across the
// bus. The bytes count in HostMemory. The buffer's Bytes is nil; host is the
// memory for the caller to fill.
func (d *Device) AllocMapped(bytes int64, label string) (*runtime.DeviceBuffer, []byte, error) {
	if d.closed.Load() {
		return nil, nil, d.errClosed("device-mapped host allocation", label)
	}
	if err := d.host.Reserve(bytes, label); err != nil {
		return nil, nil, err
	}
	fail := func(err error) (*runtime.DeviceBuffer, []byte, error) {
		d.host.Release(bytes)
		return nil, nil, fmt.Errorf("%s: device-mapped host allocation %q of %s: %w", d.Name(), label, runtime.FormatBytes(bytes), err)
	}
	blk, err := hostmem.Map(max(bytes, 1), hostmem.Options{Huge: pinnedHuge})
	if err != nil {
		return fail(err)
	}
	data := blk.Bytes()
	p := unsafe.Pointer(&data[0])
	dp, err := cHostRegisterMapped(d.ctx, p, int64(len(data)))
	if err != nil {
		blk.Free()
		return fail(err)
	}
	return runtime.NewDeviceBuffer(d, bytes, label, nil, dp, func() {
		if err := cHostUnregister(d.ctx, p); err != nil {
			fmt.Fprintf(os.Stderr, "flextensor: %s: unregistering mapped %q: %v\n", d.Name(), label, err)
		}
		if err := blk.Free(); err != nil {
			fmt.Fprintf(os.Stderr, "flextensor: %s: unmapping mapped %q: %v\n", d.Name(), label, err)
		}
		d.host.Release(bytes)
	}), data[:bytes], nil
}

var _ runtime.MappedHostDevice = (*Device)(nil)
