//go:build cuda

package cuda

// Tensor maps for Hopper's tensor memory accelerator (TMA): a kernel's
// cp.async.bulk.tensor copies name a 128-byte CUtensorMap that describes
// a global tensor (address, sizes, strides), the box a copy moves and the
// swizzle it writes into shared memory. cuTensorMapEncodeTiled (driver
// API 12.0+) builds one on the host; it is looked up in the loaded driver
// library at run time (dlsym), as pdl.go does cuLaunchKernelEx, so that
// neither the build's headers nor an older driver decide whether the
// program links or starts. A map reaches a kernel by value as a
// __grid_constant__ parameter: TensorMap.Slots gives its 16 launch
// slots, which must be the kernel's last parameter (ft_launch copies the
// slots contiguously and the driver reads the parameter's 128 bytes from
// its first slot).

/*
#cgo LDFLAGS: -ldl
#include <cuda.h>
#include <dlfcn.h>
#include <stdint.h>

typedef CUresult (*ft_tmap_encode_fn)(void* tmap, int dtype, unsigned rank, void* addr, const uint64_t* dims,
	const uint64_t* strides, const unsigned* box, const unsigned* estrides, int interleave, int swizzle, int l2, int oob);

static ft_tmap_encode_fn ft_tmap_encode_ptr;

// ft_resolve_tmap finds cuTensorMapEncodeTiled in the driver library the
// process already loaded; 1 when found.
static int ft_resolve_tmap(void) {
	void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
	if (!h) h = dlopen("libcuda.so", RTLD_LAZY | RTLD_NOLOAD);
	if (!h) return 0;
	ft_tmap_encode_ptr = (ft_tmap_encode_fn)dlsym(h, "cuTensorMapEncodeTiled");
	return ft_tmap_encode_ptr != NULL;
}

// ft_tmap_bf16_2d encodes a map of a bf16 matrix of rows × cols elements,
// rows stride bytes apart, copied in boxes of boxRows × boxCols with the
// 128-byte swizzle, rows outside the matrix read as zeros.
static CUresult ft_tmap_bf16_2d(CUcontext ctx, uint64_t* out, uint64_t addr, uint64_t cols, uint64_t rows, uint64_t stride,
		unsigned boxCols, unsigned boxRows) {
	if (!ft_tmap_encode_ptr) return CUDA_ERROR_NOT_SUPPORTED;
	CUcontext cur = NULL;
	CUresult r = cuCtxGetCurrent(&cur);  // the encoder checks the address against the current context
	if (r != CUDA_SUCCESS) return r;
	if (cur != ctx && (r = cuCtxSetCurrent(ctx)) != CUDA_SUCCESS) return r;
	uint64_t m[16] __attribute__((aligned(64)));  // the encoder wants 64-byte alignment
	uint64_t dims[2] = {cols, rows};
	uint64_t strides[1] = {stride};
	unsigned box[2] = {boxCols, boxRows};
	unsigned es[2] = {1, 1};
	// CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 9, INTERLEAVE_NONE 0, SWIZZLE_128B 3,
	// L2_PROMOTION_L2_256B 3, FLOAT_OOB_FILL_NONE 0 (zeros).
	r = ft_tmap_encode_ptr(m, 9, 2, (void*)(uintptr_t)addr, dims, strides, box, es, 0, 3, 3, 0);
	for (int i = 0; i < 16; i++) out[i] = m[i];
	return r;
}
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// TensorMap is an encoded CUtensorMap (128 bytes, 64-byte aligned in
// the kernel's parameters).
type TensorMap [16]uint64

// Slots are the map's 16 launch argument slots (the kernel's last
// parameter; see the file comment).
func (m *TensorMap) Slots() []uint64 { return m[:] }

var tmapDriver = sync.OnceValue(func() bool { return C.ft_resolve_tmap() == 1 })

// TensorMapsSupported reports whether the device can take tensor maps:
// compute capability 9.0 or newer and a driver with cuTensorMapEncodeTiled.
func (d *Device) TensorMapsSupported() bool { return d.cc >= 90 && tmapDriver() }

// TensorMapBF16 encodes the map of the bf16 matrix at device address ptr
// of rows × cols elements, rows rowBytes apart, for copies of boxRows ×
// boxCols elements into shared memory with the 128-byte swizzle (row r's
// 16-byte chunk c at r·128 + (c ^ r mod 8)·16; boxCols·2 must be 128 at
// most) and rows or columns outside the matrix read as zeros.
func (d *Device) TensorMapBF16(ptr uintptr, cols, rows, rowBytes, boxCols, boxRows int) (TensorMap, error) {
	var m TensorMap
	switch {
	case !d.TensorMapsSupported():
		return m, fmt.Errorf("cuda: tensor maps need compute capability 9.0 and cuTensorMapEncodeTiled (have %d.%d)", d.cc/10, d.cc%10)
	case ptr%16 != 0 || rowBytes%16 != 0:
		return m, fmt.Errorf("cuda: tensor map of %#x with rows %d bytes apart: both must be multiples of 16", ptr, rowBytes)
	case cols <= 0 || rows <= 0 || rowBytes < 2*cols:
		return m, fmt.Errorf("cuda: tensor map of %d × %d elements with rows %d bytes apart", rows, cols, rowBytes)
	case boxCols <= 0 || boxCols*2 > 128 || boxRows <= 0 || boxRows > 256:
		return m, fmt.Errorf("cuda: tensor map box of %d × %d elements (at most 256 rows of 128 bytes)", boxRows, boxCols)
	}
	r := C.ft_tmap_bf16_2d(d.ctx, (*C.uint64_t)(unsafe.Pointer(&m[0])), C.uint64_t(ptr), C.uint64_t(cols), C.uint64_t(rows),
		C.uint64_t(rowBytes), C.unsigned(boxCols), C.unsigned(boxRows))
	return m, check("cuTensorMapEncodeTiled", r)
}
