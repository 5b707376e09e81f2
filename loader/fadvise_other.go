//go:build !linux

package loader

// dropFileCache does nothing where posix_fadvise is missing (macOS): the
// madvise before it has released the mapping's pages, and the page cache
// keeps the file's bytes until the system needs the memory.
func dropFileCache(fd int, off, n int64) error { return nil }
