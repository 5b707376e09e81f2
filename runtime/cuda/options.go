package cuda

import "github.com/flextensor-go/flextensor/runtime/kernelcache"

// Options configure OpenWith.
type Options struct {
	// MemoryLimit caps the device memory the Device hands out, in bytes
	// (0 = only the card's own size). Allocations past it fail with an error
	// naming the allocation and its size, wrapping runtime.ErrOutOfMemory.
	MemoryLimit int64
	// KernelCache holds the modules LoadModule compiles with NVRTC, so that
	// the next process loads them instead (nil = kernelcache.Default():
	// $FT_KERNEL_CACHE or the user cache directory, then the executable's
	// kernels directory).
	KernelCache *kernelcache.Cache
}
