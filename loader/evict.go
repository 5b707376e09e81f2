package loader

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mapped holds the safetensors files this process has open (OpenFile
// registers, Close unregisters), so that their page-cache pages can be
// handed back to the kernel (EvictMapped, EvictBytes) by code that holds
// only views of their bytes.
var mapped struct {
	sync.Mutex
	files map[*File]struct{}
}

func registerMapped(sf *File) {
	mapped.Lock()
	defer mapped.Unlock()
	if mapped.files == nil {
		mapped.files = map[*File]struct{}{}
	}
	mapped.files[sf] = struct{}{}
}

func unregisterMapped(sf *File) {
	mapped.Lock()
	defer mapped.Unlock()
	delete(mapped.files, sf)
}

// Eviction is what EvictMapped dropped: the files' paths and their
// summed length.
type Eviction struct {
	Files []string
	Bytes int64
}

// EvictMapped asks the kernel to drop the page-cache pages of every
// safetensors file this process has open. Each file's pages are first
// released from this process's page tables (madvise MADV_DONTNEED on its
// mapping: the mapping is read-only and shared, so a later read faults the
// bytes in again from the file; nothing is lost), then
// posix_fadvise(POSIX_FADV_DONTNEED) on the whole file drops its clean
// pages that no process maps. A file's error does not stop the others; the
// errors are joined. What is dropped is read from disk again when next
// used.
func EvictMapped() (Eviction, error) {
	mapped.Lock()
	defer mapped.Unlock()
	var ev Eviction
	var errs []error
	for sf := range mapped.files {
		if sf.data == nil {
			continue
		}
		if err := unix.Madvise(sf.data, unix.MADV_DONTNEED); err != nil {
			errs = append(errs, fmt.Errorf("safetensors %s: madvise DONTNEED: %w", sf.path, err))
		}
		if err := dropFileCache(int(sf.f.Fd()), 0, 0); err != nil {
			errs = append(errs, fmt.Errorf("safetensors %s: fadvise DONTNEED: %w", sf.path, err))
		}
		ev.Files = append(ev.Files, sf.path)
		ev.Bytes += int64(len(sf.data))
	}
	return ev, errors.Join(errs...)
}

// EvictBytes drops the page-cache pages of the file bytes that b views (a
// slice of File.Bytes or Checkpoint.Bytes): madvise MADV_DONTNEED on the
// mapping's pages under b (rounded out to whole pages, which is harmless
// for a read-only file mapping), then posix_fadvise DONTNEED on b's file
// range (the kernel drops only the pages wholly inside it). It returns the
// bytes advised and whether b lies in a mapped safetensors file of this
// process; for a b that does not, it does nothing.
func EvictBytes(b []byte) (int64, bool, error) {
	if len(b) == 0 {
		return 0, false, nil
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	mapped.Lock()
	defer mapped.Unlock()
	for sf := range mapped.files {
		if sf.data == nil {
			continue
		}
		base := uintptr(unsafe.Pointer(unsafe.SliceData(sf.data)))
		if p < base || p+uintptr(len(b)) > base+uintptr(len(sf.data)) {
			continue
		}
		off := int64(p - base)
		return int64(len(b)), true, sf.evictRange(off, int64(len(b)))
	}
	return 0, false, nil
}

// evictRange is EvictBytes for bytes [off, off+n) of the file.
func (sf *File) evictRange(off, n int64) error {
	var errs []error
	if sf.data != nil {
		page := int64(os.Getpagesize())
		lo := off / page * page
		hi := min((off+n+page-1)/page*page, int64(len(sf.data)))
		if err := unix.Madvise(sf.data[lo:hi], unix.MADV_DONTNEED); err != nil {
			errs = append(errs, fmt.Errorf("safetensors %s: madvise DONTNEED [%d, %d): %w", sf.path, lo, hi, err))
		}
	}
	if err := dropFileCache(int(sf.f.Fd()), off, n); err != nil {
		errs = append(errs, fmt.Errorf("safetensors %s: fadvise DONTNEED [%d, %d): %w", sf.path, off, off+n, err))
	}
	return errors.Join(errs...)
}

// EvictTensor drops the page-cache pages of the named tensor's bytes in
// its file (as EvictBytes does for a view), returning their number.
func (c *Checkpoint) EvictTensor(name string) (int64, error) {
	f, ok := c.where[name]
	if !ok {
		return 0, fmt.Errorf("checkpoint %s: no tensor %q", c.dir, name)
	}
	t, err := f.Info(name)
	if err != nil {
		return 0, err
	}
	mapped.Lock()
	defer mapped.Unlock()
	if _, open := mapped.files[f]; !open {
		return 0, fmt.Errorf("safetensors %s: tensor %q: file is closed", f.path, name)
	}
	return t.Size, f.evictRange(t.Offset, t.Size)
}
