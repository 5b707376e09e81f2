//go:build linux

package hostmem

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mapBlock maps n bytes anonymously: for a huge block over-asking by
// HugePageSize, keeping the aligned part rounded up to whole huge pages
// and unmapping the slack on either side.
func mapBlock(n int64, opt Options) (*Block, error) {
	const prot = unix.PROT_READ | unix.PROT_WRITE
	const flags = unix.MAP_PRIVATE | unix.MAP_ANONYMOUS
	if !opt.Huge {
		length := uintptr(roundUp(n, int64(unix.Getpagesize())))
		p, err := unix.MmapPtr(-1, 0, nil, length, prot, flags)
		if err != nil {
			return nil, fmt.Errorf("hostmem: mmap of %d bytes: %w", length, err)
		}
		// A hint: fewer, larger pages to fault in and lock.
		_ = unix.Madvise(unsafe.Slice((*byte)(p), length), unix.MADV_HUGEPAGE)
		return &Block{data: unsafe.Slice((*byte)(p), n), base: p, length: length,
			Aligned: uintptr(p)%HugePageSize == 0}, nil
	}
	length := uintptr(roundUp(n, HugePageSize))
	p, err := unix.MmapPtr(-1, 0, nil, length+HugePageSize, prot, flags)
	if err != nil {
		return nil, fmt.Errorf("hostmem: mmap of %d bytes: %w", length+HugePageSize, err)
	}
	off := (HugePageSize - uintptr(p)%HugePageSize) % HugePageSize // slack before the aligned start
	aligned := unsafe.Add(p, off)
	if off > 0 {
		if err := unix.MunmapPtr(p, off); err != nil {
			unix.MunmapPtr(p, length+HugePageSize)
			return nil, fmt.Errorf("hostmem: unmapping %d bytes of alignment slack: %w", off, err)
		}
	}
	if tail := HugePageSize - off; tail > 0 {
		if err := unix.MunmapPtr(unsafe.Add(aligned, length), tail); err != nil {
			unix.MunmapPtr(aligned, length+tail)
			return nil, fmt.Errorf("hostmem: unmapping %d bytes of alignment slack: %w", tail, err)
		}
	}
	b := &Block{data: unsafe.Slice((*byte)(aligned), n), base: aligned, length: length, Aligned: true}
	mem := unsafe.Slice((*byte)(aligned), length)
	// Before the first touch, so that the faults themselves take huge
	// pages (THP "madvise" mode, the common default, needs it).
	if err := unix.Madvise(mem, unix.MADV_HUGEPAGE); err != nil && !errors.Is(err, unix.EINVAL) {
		b.CollapseErr = fmt.Errorf("MADV_HUGEPAGE: %w", err)
	}
	return b, nil
}

// collapse asks the kernel to put the whole block on huge pages now. The
// kernel may lack MADV_COLLAPSE (before 6.1: EINVAL), have THP disabled
// (EINVAL), or find no free huge page (EAGAIN, ENOMEM): the block then
// keeps the pages it has, and that is no error of the caller's.
func collapse(b *Block) error {
	if b.CollapseErr != nil {
		return b.CollapseErr
	}
	err := unix.Madvise(unsafe.Slice((*byte)(b.base), b.length), unix.MADV_COLLAPSE)
	switch {
	case err == nil, errors.Is(err, unix.EINVAL), errors.Is(err, unix.EAGAIN), errors.Is(err, unix.ENOMEM):
		return nil
	}
	return fmt.Errorf("MADV_COLLAPSE: %w", err)
}

func (b *Block) unmap() error {
	if b.length == 0 {
		return nil
	}
	if err := unix.MunmapPtr(b.base, b.length); err != nil {
		return fmt.Errorf("hostmem: munmap of %d bytes: %w", b.length, err)
	}
	return nil
}

func roundUp(n, to int64) int64 { return (n + to - 1) / to * to }
