package loader

import "golang.org/x/sys/unix"

// dropFileCache asks the kernel to drop the clean page-cache pages of
// bytes [off, off+n) of the file fd (n 0: to its end):
// posix_fadvise(POSIX_FADV_DONTNEED).
func dropFileCache(fd int, off, n int64) error {
	return unix.Fadvise(fd, off, n, unix.FADV_DONTNEED)
}
