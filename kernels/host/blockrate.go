package host

import (
	"fmt"
	"time"
	"unsafe"
)

// rateMinBytes is the smallest block RateHostBlock rates: below it a
// server's last-level cache serves much of the read, and the rate would be
// the cache's, not the memory's.
const rateMinBytes = 32 << 20

// RateHostBlock reads data once with ReadSum (the STREAM-like read, on all
// the backend's threads) and returns the rate in bytes a second: how fast
// this block of host memory reads (offload.HostBlockRater; the offload
// engine rates each unit's pinned block after packing it, because on a VM
// whose memory is unevenly fast by physical page the host-computed units
// run at their block's rate). Blocks under 32 MiB get 0, not rated. The
// bytes are read as float32 values whose sum is discarded; data is not
// changed.
func (b *Backend) RateHostBlock(data []byte) (float64, error) {
	if b == nil || b.e == nil {
		return 0, fmt.Errorf("host: RateHostBlock on a nil backend")
	}
	// Whole float32s from the first 4-byte-aligned byte.
	skip := int((4 - uintptr(unsafe.Pointer(unsafe.SliceData(data)))%4) % 4)
	if len(data) < rateMinBytes || len(data) < skip+4 {
		return 0, nil
	}
	n := (len(data) - skip) / 4
	buf := unsafe.Slice((*float32)(unsafe.Pointer(&data[skip])), n)
	t0 := time.Now()
	b.e.ReadSum(buf)
	d := time.Since(t0).Seconds()
	return float64(n*4) / max(d, 1e-9), nil
}
