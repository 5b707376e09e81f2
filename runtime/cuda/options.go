package cuda

// Options configure OpenWith.
type Options struct {
	// MemoryLimit caps the device memory the Device hands out, in bytes
	// (0 = only the card's own size). Allocations past it fail with an error
	// naming the allocation and its size, wrapping runtime.ErrOutOfMemory.
	MemoryLimit int64
}
