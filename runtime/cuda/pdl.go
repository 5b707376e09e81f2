//go:build cuda

package cuda

// Programmatic dependent launch (Hopper, sm_90): a kernel launched with the
// attribute CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION may start
// its blocks while the previous kernel of the stream is still finishing, so
// its launch latency and prologue hide behind that kernel's tail. The
// kernel must then resolve the dependency itself: it executes
// griddepcontrol.wait (ft_pdl_wait in kernels/cuda/common.cuh) before it
// touches any memory an earlier kernel reads or writes. A kernel without
// that wait launched this way would race, so the launch is a per-kernel
// opt-in (Function.SetDependentLaunch) made where the kernel is loaded.
//
// cuLaunchKernelEx (driver API 11.8+) is looked up in the loaded driver
// library at run time (dlsym) and called through a pointer with the launch
// structures declared here with the driver's ABI, so neither the build's
// headers nor an older driver decide whether the program links or starts;
// without it launches fall back to cuLaunchKernel.

/*
#cgo LDFLAGS: -ldl
#include <cuda.h>
#include <dlfcn.h>
#include <stdint.h>

// The driver's CUlaunchAttribute: a 4-byte id, 4 bytes of padding, a
// 64-byte value union (8-byte aligned: it holds pointers).
typedef struct {
	unsigned int id;
	char pad[4];
	union {
		char bytes[64];
		int i;
		unsigned long long align;
	} value;
} ft_launch_attr;

// The driver's CUlaunchConfig.
typedef struct {
	unsigned int gx, gy, gz, bx, by, bz, smem;
	CUstream stream;
	ft_launch_attr* attrs;
	unsigned int nattrs;
} ft_launch_config;

_Static_assert(sizeof(ft_launch_attr) == 72, "CUlaunchAttribute is 72 bytes");
_Static_assert(sizeof(ft_launch_config) == 56, "CUlaunchConfig is 56 bytes");
#if defined(CUDA_VERSION) && CUDA_VERSION >= 11080
_Static_assert(sizeof(ft_launch_attr) == sizeof(CUlaunchAttribute), "CUlaunchAttribute layout");
_Static_assert(sizeof(ft_launch_config) == sizeof(CUlaunchConfig), "CUlaunchConfig layout");
#endif

// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
#define FT_ATTR_PROGRAMMATIC_SERIALIZATION 6

typedef CUresult (*ft_launch_ex_fn)(const ft_launch_config*, CUfunction, void**, void**);

static ft_launch_ex_fn ft_launch_ex_ptr;

// ft_resolve_launch_ex finds cuLaunchKernelEx in the driver library the
// process already loaded; 1 when found.
static int ft_resolve_launch_ex(void) {
	void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
	if (!h) h = dlopen("libcuda.so", RTLD_LAZY | RTLD_NOLOAD);
	if (!h) return 0;
	ft_launch_ex_ptr = (ft_launch_ex_fn)dlsym(h, "cuLaunchKernelEx");
	return ft_launch_ex_ptr != NULL;
}

// FT_PDL_MAX_ARGS is cgo.go's FT_MAX_ARGS: every launch may take the dependent
// path (with 24 here, a kernel of 25 arguments failed with
// CUDA_ERROR_INVALID_VALUE only when launched dependently).
#define FT_PDL_MAX_ARGS 128

// ft_launch_pdl is ft_launch (cgo.go) through cuLaunchKernelEx with
// programmatic stream serialization allowed.
static CUresult ft_launch_pdl(CUcontext ctx, CUfunction f,
		unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
		unsigned smem, CUstream s, const uint64_t* args, int nargs) {
	CUcontext cur = NULL;
	CUresult r = cuCtxGetCurrent(&cur);
	if (r != CUDA_SUCCESS) return r;
	if (cur != ctx && (r = cuCtxSetCurrent(ctx)) != CUDA_SUCCESS) return r;
	if (!ft_launch_ex_ptr) return CUDA_ERROR_NOT_SUPPORTED;
	if (nargs < 0 || nargs > FT_PDL_MAX_ARGS) return CUDA_ERROR_INVALID_VALUE;
	uint64_t slots[FT_PDL_MAX_ARGS];
	void* params[FT_PDL_MAX_ARGS];
	for (int i = 0; i < nargs; i++) {
		slots[i] = args[i];
		params[i] = &slots[i];
	}
	ft_launch_attr attr = {0};
	attr.id = FT_ATTR_PROGRAMMATIC_SERIALIZATION;
	attr.value.i = 1;
	ft_launch_config cfg = {gx, gy, gz, bx, by, bz, smem, s, &attr, 1};
	return ft_launch_ex_ptr(&cfg, f, params, NULL);
}
*/
import "C"

import (
	"os"
	"sync"
	"unsafe"
)

// pdlDriver is whether the driver exports cuLaunchKernelEx and is new
// enough to capture programmatic launches into graphs (CUDA 12.3).
var pdlDriver = sync.OnceValue(func() bool {
	return C.ft_resolve_launch_ex() == 1 && driverVersion() >= 12030
})

// pdlSupported is whether d can launch kernels with programmatic stream
// serialization: compute capability 9.0 or newer and a driver that has it.
func (d *Device) pdlSupported() bool { return d.cc >= 90 && pdlDriver() }

// initPDL turns programmatic dependent launch on where supported, unless
// the environment says FT_PDL=0.
func (d *Device) initPDL() {
	d.pdl.Store(os.Getenv("FT_PDL") != "0" && d.pdlSupported())
}

// SetDependentLaunch turns programmatic dependent launch on or off for the
// kernels that allow it (Function.SetDependentLaunch) and reports whether
// it is now on: asking for it on a GPU older than sm_90 or a driver without
// cuLaunchKernelEx leaves it off. Launches already made and graphs already
// captured keep how they were launched. On by default where supported,
// unless FT_PDL=0.
func (d *Device) SetDependentLaunch(on bool) bool {
	on = on && d.pdlSupported()
	d.pdl.Store(on)
	return on
}

// DependentLaunch reports whether programmatic dependent launch is on.
func (d *Device) DependentLaunch() bool { return d.pdl.Load() }

// SetDependentLaunch declares that this kernel may be launched with
// programmatic stream serialization: every one of its threads executes
// griddepcontrol.wait (a no-op before sm_90) before it reads or writes
// memory that an earlier kernel of the stream reads or writes, on every
// path, early exits included. Launches then overlap the previous kernel's
// tail while the device has dependent launch on. Declaring it for a kernel
// without the wait makes its launches race with the kernel before.
func (f *Function) SetDependentLaunch(allowed bool) { f.pdl = allowed }

// DependentLaunch reports whether the kernel was declared safe for
// programmatic dependent launch.
func (f *Function) DependentLaunch() bool { return f.pdl }

// enqueue launches f on s: through cuLaunchKernelEx with programmatic
// stream serialization when f allows it and the device has it on, else
// through cuLaunchKernel.
func (f *Function) enqueue(s *Stream, grid, block [3]uint32, smem uint32, args []uint64) error {
	if f.pdl && f.dev.pdl.Load() {
		return check("cuLaunchKernelEx", cLaunchPDL(f.dev.ctx, f.f, grid, block, smem, s.s, args))
	}
	return check("cuLaunchKernel", cLaunch(f.dev.ctx, f.f, grid, block, smem, s.s, args))
}

// cLaunchPDL is cLaunch with programmatic stream serialization allowed.
func cLaunchPDL(ctx cContext, f cFunction, grid, block [3]uint32, smem uint32, s cStream, args []uint64) C.CUresult {
	var p *C.uint64_t
	if len(args) > 0 {
		p = (*C.uint64_t)(unsafe.Pointer(&args[0]))
	}
	return C.ft_launch_pdl(ctx, f, C.uint(grid[0]), C.uint(grid[1]), C.uint(grid[2]),
		C.uint(block[0]), C.uint(block[1]), C.uint(block[2]), C.uint(smem), s, p, C.int(len(args)))
}
