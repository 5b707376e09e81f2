//go:build linux

package host

import (
	"syscall"
	"unsafe"
)

// dramBuffer returns n bytes of anonymous memory outside the Go heap (a
// 512 MiB heap object costs the race detector's shadow memory seconds of
// page faults), populated up front, as float32s, and the function that
// unmaps it.
func dramBuffer(n int) ([]float32, func(), error) {
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE|syscall.MAP_POPULATE)
	if err != nil {
		return nil, nil, err
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n/4), func() { _ = syscall.Munmap(b) }, nil
}
