package loader

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// OpenRegular opens path for reading without blocking on what is not a
// regular file: a named pipe, a device or a socket in place of a checkpoint
// file would block open(2) or read(2) forever, so it is refused with an
// error naming the path and what it is. Symbolic links are followed (the
// Hugging Face cache links snapshot files to blobs).
func OpenRegular(path string) (*os.File, error) {
	// O_NONBLOCK makes open(2) of a FIFO return at once; fstat then says
	// what it is. For a regular file the flag changes nothing.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("not a regular file (%s)", describeMode(st.Mode()))}
	}
	return f, nil
}

// ReadRegularFile is os.ReadFile through OpenRegular.
func ReadRegularFile(path string) ([]byte, error) {
	f, err := OpenRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// describeMode names a non-regular file type.
func describeMode(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "mode " + m.String()
}
