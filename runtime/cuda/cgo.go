//go:build cuda

package cuda

// This file is the project's own thin cgo layer over the CUDA driver API,
// cuBLAS and NVRTC: the calls gorgonia.org/cu lacks (pinned host memory,
// bf16 GEMM, NVRTC to cubin) and the hot-path calls (launches, async copies,
// events, graphs) made directly, without a channel round trip per call. Every
// function takes the context and makes it current on the calling OS thread
// first (a thread-local read when it already is), so any goroutine may call.

/*
#cgo LDFLAGS: -lcuda -lcublas -lnvrtc
#include <cuda.h>
#include <cublas_v2.h>
#include <nvrtc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static CUresult ft_ctx(CUcontext ctx) {
	CUcontext cur = NULL;
	CUresult r = cuCtxGetCurrent(&cur);
	if (r != CUDA_SUCCESS) return r;
	if (cur == ctx) return CUDA_SUCCESS;
	return cuCtxSetCurrent(ctx);
}

static const char* ft_err_name(CUresult r) {
	const char* s = NULL;
	if (cuGetErrorName(r, &s) != CUDA_SUCCESS || s == NULL) return "CUDA_ERROR_UNKNOWN_CODE";
	return s;
}

static const char* ft_err_string(CUresult r) {
	const char* s = NULL;
	if (cuGetErrorString(r, &s) != CUDA_SUCCESS || s == NULL) return "unknown error";
	return s;
}

static CUresult ft_init(void) { return cuInit(0); }

static CUresult ft_primary_ctx(int ordinal, CUdevice* dev, CUcontext* ctx) {
	CUresult r = cuDeviceGet(dev, ordinal);
	if (r != CUDA_SUCCESS) return r;
	r = cuDevicePrimaryCtxRetain(ctx, *dev);
	if (r != CUDA_SUCCESS) return r;
	return cuCtxSetCurrent(*ctx);
}

static CUresult ft_primary_ctx_release(CUdevice dev) { return cuDevicePrimaryCtxRelease(dev); }

// The values sched.go names (SchedAuto ... schedMask).
_Static_assert(CU_CTX_SCHED_AUTO == 0x0 && CU_CTX_SCHED_SPIN == 0x1 && CU_CTX_SCHED_YIELD == 0x2 &&
	CU_CTX_SCHED_BLOCKING_SYNC == 0x4 && CU_CTX_SCHED_MASK == 0x7, "CU_CTX_SCHED_* values");

// ft_primary_ctx_flags reads the primary context's flags into *old and, when
// set, writes them with their scheduling bits replaced by sched (the other
// flags kept), before the context is retained. *active is whether the
// primary context was already active (retained by someone) when the flags
// were read: an active one keeps running with the flags it was made with.
static CUresult ft_primary_ctx_flags(int ordinal, unsigned sched, int set, unsigned* old, unsigned* now, int* active) {
	CUdevice dev;
	int after = 0;
	*active = 0;
	CUresult r = cuDeviceGet(&dev, ordinal);
	if (r != CUDA_SUCCESS) return r;
	r = cuDevicePrimaryCtxGetState(dev, old, active);
	if (r != CUDA_SUCCESS) return r;
	*now = *old;
	if (!set) return CUDA_SUCCESS;
	r = cuDevicePrimaryCtxSetFlags(dev, (*old & ~(unsigned)CU_CTX_SCHED_MASK) | (sched & CU_CTX_SCHED_MASK));
	if (r != CUDA_SUCCESS) return r;
	return cuDevicePrimaryCtxGetState(dev, now, &after);
}

static CUresult ft_set_current(CUcontext ctx) { return ft_ctx(ctx); }

static CUresult ft_ctx_sync(CUcontext ctx) {
	CUresult r = ft_ctx(ctx); if (r != CUDA_SUCCESS) return r;
	return cuCtxSynchronize();
}

static CUresult ft_host_alloc(CUcontext ctx, void** p, size_t n) {
	CUresult r = ft_ctx(ctx); if (r != CUDA_SUCCESS) return r;
	return cuMemHostAlloc(p, n, CU_MEMHOSTALLOC_PORTABLE);
}

static CUresult ft_host_free(CUcontext ctx, void* p) {
	CUresult r = ft_ctx(ctx); if (r != CUDA_SUCCESS) return r;
	return cuMemFreeHost(p);
}

static CUresult ft_host_register(CUcontext ctx, void* p, size_t n) {
	CUresult r = ft_ctx(ctx); if (r != CUDA_SUCCESS) return r;
	return cuMemHostRegister(p, n, CU_MEMHOSTREGISTER_PORTABLE);
}

static CUresult ft_host_unregister(CUcontext ctx, void* p) {
	CUresult r = ft_ctx(ctx); if (r != CUDA_SUCCESS) return r;
	return cuMemHostUnregister(p);
}

// ft_host_register_mapped page-locks host memory and maps it into the
// device's address space; *dp is the address kernels read it through.
static CUresult ft_host_register_mapped(CUcontext ctx, void* p, size_t n, CUdeviceptr* dp) {
	CUresult r = ft_ctx(ctx); if (r != CUDA_SUCCESS) return r;
	r = cuMemHostRegister(p, n, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
	if (r != CUDA_SUCCESS) return r;
	r = cuMemHostGetDevicePointer(dp, p, 0);
	if (r != CUDA_SUCCESS) cuMemHostUnregister(p);
	return r;
}

static CUresult ft_stream_create(CUcontext ctx, CUstream* s) {
	CUresult r = ft_ctx(ctx); if (r != CUDA_SUCCESS) return r;
	return cuStreamCreate(s, CU_STREAM_NON_BLOCKING);
}

static CUresult ft_stream_destroy(CUcontext ctx, CUstream s) {
	CUresult r = ft_ctx(ctx); if (r != CUDA_SUCCESS) return r;
	return cuStreamDestroy(s);
}

static CUresult ft_stream_sync(CUcontext ctx, CUstream s) {
	CUresult r = ft_ctx(ctx); if (r != CUDA_SUCCESS) return r;
	return cuStreamSynchronize(s);
}

static CUresult ft_stream_wait(CUcontext ctx, CUstream s, CUevent e) {
	CUresult r = ft_ctx(ctx); if (r != CUDA_SUCCESS) return r;
	return cuStreamWaitEvent(s, e, 0);
}

static CUresult ft_h2d(CUcontext ctx, CUdeviceptr dst, const void* src, size_t n, CUstream s) {
	CUresult r = ft_ctx(ctx); if (r != CUDA_SUCCESS) return r;
	return cuMemcpyHtoDAsync(dst, src, n, s);
}

static CUresult ft_d2h(CUcontext ctx, void* dst, CUdeviceptr src, size_t n, CUstream s) {
	CUresult r = ft_ctx(ctx); if (r != CUDA_SUCCESS) return r;
	return cuMemcpyDtoHAsync(dst, src, n, s);
}

static CUresult ft_d2d(CUcontext ctx, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
	CUresult r = ft_ctx(ctx); if (r != CUDA_SUCCESS) return r;
	return cuMemcpyDtoDAsync(dst, src, n, s);
}

// ft_h2d_sync copies from pageable host memory and waits for the copy.
static CUresult ft_h2d_sync(CUcontext ctx, CUdeviceptr dst, const void* src, size_t n, CUstream s) {
	CUresult r = ft_ctx(ctx); if (r != CUDA_SUCCESS) return r;
	r = cuMemcpyHtoDAsync(dst, src, n, s);
	if (r != CUDA_SUCCESS) return r;
	return cuStreamSynchronize(s);
}

// ft_d2h_sync copies into pageable host memory and waits for the copy.
static CUresult ft_d2h_sync(CUcontext ctx, void* dst, CUdeviceptr src, size_t n, CUstream s) {
	CUresult r = ft_ctx(ctx); if (r != CUDA_SUCCESS) return r;
	r = cuMemcpyDtoHAsync(dst, src, n, s);
	if (r != CUDA_SUCCESS) return r;
	return cuStreamSynchronize(s);
}

static CUresult ft_memset16(CUcontext ctx, CUdeviceptr dst, unsigned short v, size_t n, CUstream s) {
	CUresult r = ft_ctx(ctx); if (r != CUDA_SUCCESS) return r;
	return cuMemsetD16Async(dst, v, n, s);
}

static CUresult ft_memset32(CUcontext ctx, CUdeviceptr dst, unsigned int v, size_t n, CUstream s) {
	CUresult r = ft_ctx(ctx); if (r != CUDA_SUCCESS) return r;
	return cuMemsetD32Async(dst, v, n, s);
}

static CUresult ft_event_create(CUcontext ctx, CUevent* e) {
	CUresult r = ft_ctx(ctx); if (r != CUDA_SUCCESS) return r;
	return cuEventCreate(e, CU_EVENT_DEFAULT);
}

static CUresult ft_event_destroy(CUcontext ctx, CUevent e) {
	CUresult r = ft_ctx(ctx); if (r != CUDA_SUCCESS) return r;
	return cuEventDestroy(e);
}

static CUresult ft_event_record(CUcontext ctx, CUevent e, CUstream s) {
	CUresult r = ft_ctx(ctx); if (r != CUDA_SUCCESS) return r;
	return cuEventRecord(e, s);
}

static CUresult ft_event_sync(CUcontext ctx, CUevent e) {
	CUresult r = ft_ctx(ctx); if (r != CUDA_SUCCESS) return r;
	return cuEventSynchronize(e);
}

static CUresult ft_event_query(CUcontext ctx, CUevent e) {
	CUresult r = ft_ctx(ctx); if (r != CUDA_SUCCESS) return r;
	return cuEventQuery(e);
}

static CUresult ft_event_elapsed(CUcontext ctx, float* ms, CUevent start, CUevent end) {
	CUresult r = ft_ctx(ctx); if (r != CUDA_SUCCESS) return r;
	return cuEventElapsedTime(ms, start, end);
}

static CUresult ft_module_load(CUcontext ctx, CUmodule* m, const void* image) {
	CUresult r = ft_ctx(ctx); if (r != CUDA_SUCCESS) return r;
	return cuModuleLoadData(m, image);
}

static CUresult ft_module_unload(CUcontext ctx, CUmodule m) {
	CUresult r = ft_ctx(ctx); if (r != CUDA_SUCCESS) return r;
	return cuModuleUnload(m);
}

static CUresult ft_module_function(CUcontext ctx, CUfunction* f, CUmodule m, const char* name) {
	CUresult r = ft_ctx(ctx); if (r != CUDA_SUCCESS) return r;
	return cuModuleGetFunction(f, m, name);
}

static CUresult ft_module_global(CUcontext ctx, CUdeviceptr* p, size_t* n, CUmodule m, const char* name) {
	CUresult r = ft_ctx(ctx); if (r != CUDA_SUCCESS) return r;
	return cuModuleGetGlobal(p, n, m, name);
}

static CUresult ft_func_max_smem(CUcontext ctx, CUfunction f, int bytes) {
	CUresult r = ft_ctx(ctx); if (r != CUDA_SUCCESS) return r;
	return cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes);
}

static CUresult ft_occupancy(CUcontext ctx, int* n, CUfunction f, int block, size_t smem) {
	CUresult r = ft_ctx(ctx); if (r != CUDA_SUCCESS) return r;
	return cuOccupancyMaxActiveBlocksPerMultiprocessor(n, f, block, smem);
}

// ft_func_resources reads f's registers per thread and local (spill and
// stack) bytes per thread.
static CUresult ft_func_resources(CUcontext ctx, CUfunction f, int* regs, int* local) {
	CUresult r = ft_ctx(ctx); if (r != CUDA_SUCCESS) return r;
	r = cuFuncGetAttribute(regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f); if (r != CUDA_SUCCESS) return r;
	return cuFuncGetAttribute(local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f);
}

#define FT_MAX_ARGS 128  // up to 112 of them seven tensor maps (tmap.go)

// ft_launch launches f with nargs 8-byte argument slots: each kernel
// parameter is read from the start of its slot (4-byte parameters from the
// low half, little-endian). cuLaunchKernel copies the values before it
// returns, so the slots can live on this stack frame.
static CUresult ft_launch(CUcontext ctx, CUfunction f,
		unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
		unsigned smem, CUstream s, const uint64_t* args, int nargs) {
	CUresult r = ft_ctx(ctx); if (r != CUDA_SUCCESS) return r;
	if (nargs < 0 || nargs > FT_MAX_ARGS) return CUDA_ERROR_INVALID_VALUE;
	uint64_t slots[FT_MAX_ARGS];
	void* params[FT_MAX_ARGS];
	for (int i = 0; i < nargs; i++) {
		slots[i] = args[i];
		params[i] = &slots[i];
	}
	return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, smem, s, params, NULL);
}

static CUresult ft_capture_begin(CUcontext ctx, CUstream s) {
	CUresult r = ft_ctx(ctx); if (r != CUDA_SUCCESS) return r;
	return cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED);
}

static CUresult ft_capture_end(CUcontext ctx, CUstream s, CUgraph* g) {
	CUresult r = ft_ctx(ctx); if (r != CUDA_SUCCESS) return r;
	return cuStreamEndCapture(s, g);
}

static CUresult ft_graph_instantiate(CUcontext ctx, CUgraphExec* x, CUgraph g) {
	CUresult r = ft_ctx(ctx); if (r != CUDA_SUCCESS) return r;
	return cuGraphInstantiateWithFlags(x, g, 0);
}

static CUresult ft_graph_launch(CUcontext ctx, CUgraphExec x, CUstream s) {
	CUresult r = ft_ctx(ctx); if (r != CUDA_SUCCESS) return r;
	return cuGraphLaunch(x, s);
}

static CUresult ft_graph_destroy(CUcontext ctx, CUgraphExec x, CUgraph g) {
	CUresult r = ft_ctx(ctx); if (r != CUDA_SUCCESS) return r;
	CUresult r1 = CUDA_SUCCESS, r2 = CUDA_SUCCESS;
	if (x) r1 = cuGraphExecDestroy(x);
	if (g) r2 = cuGraphDestroy(g);
	return r1 != CUDA_SUCCESS ? r1 : r2;
}

static int ft_graph_nodes(CUgraph g) {
	size_t n = 0;
	if (cuGraphGetNodes(g, NULL, &n) != CUDA_SUCCESS) return -1;
	return (int)n;
}

// cuBLAS.

static int ft_blas_create(CUcontext ctx, cublasHandle_t* h, CUstream s, CUdeviceptr ws, size_t wsBytes) {
	if (ft_ctx(ctx) != CUDA_SUCCESS) return -1;
	cublasStatus_t st = cublasCreate(h);
	if (st != CUBLAS_STATUS_SUCCESS) return (int)st;
	st = cublasSetStream(*h, (cudaStream_t)s);
	if (st != CUBLAS_STATUS_SUCCESS) return (int)st;
	if (ws != 0) {
		st = cublasSetWorkspace(*h, (void*)ws, wsBytes);
		if (st != CUBLAS_STATUS_SUCCESS) return (int)st;
	}
	return 0;
}

static int ft_blas_destroy(CUcontext ctx, cublasHandle_t h) {
	if (ft_ctx(ctx) != CUDA_SUCCESS) return -1;
	return (int)cublasDestroy(h);
}

static const char* ft_blas_status(int st) {
	if (st < 0) return "could not make the CUDA context current";
	return cublasGetStatusString((cublasStatus_t)st);
}

// ft_gemm_rm computes, row-major, C[M,N] = A[M,K]·B[N,K]ᵀ with bf16 A and B,
// fp32 accumulation, and C in bf16 (cBF16 != 0) or fp32. Column-major, the
// same memory holds Cᵀ[N,M] = B·Aᵀ, where B's memory is the column-major
// [K,N] matrix Bᵀ (so it is read transposed, ld K) and A's is [K,M] = Aᵀ
// (read as it is, ld K).
static int ft_gemm_rm(CUcontext ctx, cublasHandle_t h, CUstream s,
		CUdeviceptr c, int cBF16, CUdeviceptr a, CUdeviceptr b, int M, int N, int K) {
	if (ft_ctx(ctx) != CUDA_SUCCESS) return -1;
	cublasStatus_t st = cublasSetStream(h, (cudaStream_t)s);
	if (st != CUBLAS_STATUS_SUCCESS) return (int)st;
	const float alpha = 1.0f, beta = 0.0f;
	st = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K,
		&alpha, (const void*)b, CUDA_R_16BF, K,
		(const void*)a, CUDA_R_16BF, K,
		&beta, (void*)c, cBF16 ? CUDA_R_16BF : CUDA_R_32F, N,
		CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
	return (int)st;
}

// NVRTC.

// ft_nvrtc compiles src to a cubin. On success *image holds malloc'ed bytes
// (free with free); on failure *log holds the malloc'ed compiler log, if any.
static int ft_nvrtc(const char* src, const char* name, const char** opts, int nopts,
		char** image, size_t* imageLen, char** log) {
	nvrtcProgram prog;
	*image = NULL; *imageLen = 0; *log = NULL;
	nvrtcResult r = nvrtcCreateProgram(&prog, src, name, 0, NULL, NULL);
	if (r != NVRTC_SUCCESS) return (int)r;
	r = nvrtcCompileProgram(prog, nopts, opts);
	size_t logLen = 0;
	if (nvrtcGetProgramLogSize(prog, &logLen) == NVRTC_SUCCESS && logLen > 1) {
		*log = (char*)malloc(logLen);
		if (*log != NULL && nvrtcGetProgramLog(prog, *log) != NVRTC_SUCCESS) {
			free(*log);
			*log = NULL;
		}
	}
	if (r == NVRTC_SUCCESS) {
		size_t n = 0;
		r = nvrtcGetCUBINSize(prog, &n);
		if (r == NVRTC_SUCCESS) {
			*image = (char*)malloc(n);
			if (*image == NULL) {
				r = NVRTC_ERROR_OUT_OF_MEMORY;
			} else {
				r = nvrtcGetCUBIN(prog, *image);
				*imageLen = n;
			}
		}
	}
	nvrtcDestroyProgram(&prog);
	return (int)r;
}

static const char* ft_nvrtc_status(int r) { return nvrtcGetErrorString((nvrtcResult)r); }

static int ft_nvrtc_version(int* major, int* minor) { return (int)nvrtcVersion(major, minor); }

static int ft_driver_version(void) {
	int v = 0;
	if (cuDriverGetVersion(&v) != CUDA_SUCCESS) return -1;
	return v;
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Error is a failed call into the CUDA driver, cuBLAS or NVRTC.
type Error struct {
	Op   string // the call and what it was for ("cuMemAlloc of 2.00 GiB for \"x\"")
	Lib  string // "CUDA", "cuBLAS" or "NVRTC"
	Code int    // the library's status code
	Name string // the status's name, where the library has one
	Msg  string // the library's description of the status
}

// Error says which call failed and the library's status (name, code, description).
func (e *Error) Error() string {
	if e.Name != "" {
		return fmt.Sprintf("%s: %s (%s %d: %s)", e.Op, e.Name, e.Lib, e.Code, e.Msg)
	}
	return fmt.Sprintf("%s: %s error %d: %s", e.Op, e.Lib, e.Code, e.Msg)
}

// IsOutOfMemory reports whether the status was CUDA_ERROR_OUT_OF_MEMORY.
func (e *Error) IsOutOfMemory() bool {
	return e.Lib == "CUDA" && e.Code == int(C.CUDA_ERROR_OUT_OF_MEMORY)
}

func check(op string, r C.CUresult) error {
	if r == C.CUDA_SUCCESS {
		return nil
	}
	return &Error{Op: op, Lib: "CUDA", Code: int(r), Name: C.GoString(C.ft_err_name(r)), Msg: C.GoString(C.ft_err_string(r))}
}

func checkBLAS(op string, st C.int) error {
	if st == 0 {
		return nil
	}
	return &Error{Op: op, Lib: "cuBLAS", Code: int(st), Msg: C.GoString(C.ft_blas_status(st))}
}

// notReady is cuEventQuery's "still running" status.
const notReady = C.CUDA_ERROR_NOT_READY

type (
	cContext   = C.CUcontext
	cDevice    = C.CUdevice
	cStream    = C.CUstream
	cEvent     = C.CUevent
	cModule    = C.CUmodule
	cFunction  = C.CUfunction
	cGraph     = C.CUgraph
	cGraphExec = C.CUgraphExec
	cBLAS      = C.cublasHandle_t
)

func cInit() error { return check("cuInit", C.ft_init()) }

func cPrimaryContext(ordinal int) (cDevice, cContext, error) {
	var dev C.CUdevice
	var ctx C.CUcontext
	err := check(fmt.Sprintf("retaining the primary context of device %d", ordinal), C.ft_primary_ctx(C.int(ordinal), &dev, &ctx))
	return dev, ctx, err
}

// cPrimarySched sets the scheduling bits of device ordinal's primary
// context to sched when set, and returns its flags before and after and
// whether the context was already active (then it keeps the flags it was
// made with until it is released by all and made again).
func cPrimarySched(ordinal int, sched uint32, set bool) (old, now uint32, active bool, err error) {
	var o, n C.uint
	var a C.int
	s := C.int(0)
	if set {
		s = 1
	}
	err = check(fmt.Sprintf("setting the scheduling flags of device %d's primary context", ordinal), C.ft_primary_ctx_flags(C.int(ordinal), C.uint(sched), s, &o, &n, &a))
	return uint32(o), uint32(n), a != 0, err
}

func cReleasePrimary(dev cDevice) error {
	return check("cuDevicePrimaryCtxRelease", C.ft_primary_ctx_release(dev))
}

func cSetCurrent(ctx cContext) error { return check("cuCtxSetCurrent", C.ft_set_current(ctx)) }

func cCtxSync(ctx cContext) error { return check("cuCtxSynchronize", C.ft_ctx_sync(ctx)) }

func cHostAlloc(ctx cContext, n int64) (unsafe.Pointer, C.CUresult) {
	var p unsafe.Pointer
	r := C.ft_host_alloc(ctx, &p, C.size_t(n))
	return p, r
}

func cHostFree(ctx cContext, p unsafe.Pointer) error {
	return check("cuMemFreeHost", C.ft_host_free(ctx, p))
}

// cHostRegister page-locks host memory the process mapped itself.
func cHostRegister(ctx cContext, p unsafe.Pointer, n int64) error {
	return check("cuMemHostRegister", C.ft_host_register(ctx, p, C.size_t(n)))
}

func cHostUnregister(ctx cContext, p unsafe.Pointer) error {
	return check("cuMemHostUnregister", C.ft_host_unregister(ctx, p))
}

// cHostRegisterMapped page-locks host memory the process mapped itself,
// maps it for the device, and returns the device address of p.
func cHostRegisterMapped(ctx cContext, p unsafe.Pointer, n int64) (uintptr, error) {
	var dp C.CUdeviceptr
	err := check("cuMemHostRegister(DEVICEMAP)/cuMemHostGetDevicePointer", C.ft_host_register_mapped(ctx, p, C.size_t(n), &dp))
	return uintptr(dp), err
}

func cStreamCreate(ctx cContext) (cStream, error) {
	var s C.CUstream
	err := check("cuStreamCreate", C.ft_stream_create(ctx, &s))
	return s, err
}

func cStreamDestroy(ctx cContext, s cStream) error {
	return check("cuStreamDestroy", C.ft_stream_destroy(ctx, s))
}

func cStreamSync(ctx cContext, s cStream) C.CUresult { return C.ft_stream_sync(ctx, s) }

func cStreamWait(ctx cContext, s cStream, e cEvent) error {
	return check("cuStreamWaitEvent", C.ft_stream_wait(ctx, s, e))
}

func cH2D(ctx cContext, dst uintptr, src unsafe.Pointer, n int64, s cStream) C.CUresult {
	return C.ft_h2d(ctx, C.CUdeviceptr(dst), src, C.size_t(n), s)
}

func cD2H(ctx cContext, dst unsafe.Pointer, src uintptr, n int64, s cStream) C.CUresult {
	return C.ft_d2h(ctx, dst, C.CUdeviceptr(src), C.size_t(n), s)
}

func cD2D(ctx cContext, dst, src uintptr, n int64, s cStream) C.CUresult {
	return C.ft_d2d(ctx, C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(n), s)
}

func cH2DSync(ctx cContext, dst uintptr, src []byte, s cStream) C.CUresult {
	if len(src) == 0 {
		return C.CUDA_SUCCESS
	}
	return C.ft_h2d_sync(ctx, C.CUdeviceptr(dst), unsafe.Pointer(&src[0]), C.size_t(len(src)), s)
}

func cD2HSync(ctx cContext, dst []byte, src uintptr, s cStream) C.CUresult {
	if len(dst) == 0 {
		return C.CUDA_SUCCESS
	}
	return C.ft_d2h_sync(ctx, unsafe.Pointer(&dst[0]), C.CUdeviceptr(src), C.size_t(len(dst)), s)
}

func cMemset16(ctx cContext, dst uintptr, v uint16, n int64, s cStream) C.CUresult {
	return C.ft_memset16(ctx, C.CUdeviceptr(dst), C.ushort(v), C.size_t(n), s)
}

func cMemset32(ctx cContext, dst uintptr, v uint32, n int64, s cStream) C.CUresult {
	return C.ft_memset32(ctx, C.CUdeviceptr(dst), C.uint(v), C.size_t(n), s)
}

func cEventCreate(ctx cContext) (cEvent, error) {
	var e C.CUevent
	err := check("cuEventCreate", C.ft_event_create(ctx, &e))
	return e, err
}

func cEventDestroy(ctx cContext, e cEvent) error {
	return check("cuEventDestroy", C.ft_event_destroy(ctx, e))
}

func cEventRecord(ctx cContext, e cEvent, s cStream) error {
	return check("cuEventRecord", C.ft_event_record(ctx, e, s))
}

func cEventSync(ctx cContext, e cEvent) C.CUresult { return C.ft_event_sync(ctx, e) }

func cEventQuery(ctx cContext, e cEvent) C.CUresult { return C.ft_event_query(ctx, e) }

func cEventElapsed(ctx cContext, start, end cEvent) (float32, error) {
	var ms C.float
	err := check("cuEventElapsedTime", C.ft_event_elapsed(ctx, &ms, start, end))
	return float32(ms), err
}

func cModuleLoad(ctx cContext, image []byte) (cModule, error) {
	var m C.CUmodule
	err := check("cuModuleLoadData", C.ft_module_load(ctx, &m, unsafe.Pointer(&image[0])))
	return m, err
}

func cModuleUnload(ctx cContext, m cModule) error {
	return check("cuModuleUnload", C.ft_module_unload(ctx, m))
}

func cModuleFunction(ctx cContext, m cModule, name string) (cFunction, error) {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	var f C.CUfunction
	err := check("cuModuleGetFunction "+name, C.ft_module_function(ctx, &f, m, cs))
	return f, err
}

func cModuleGlobal(ctx cContext, m cModule, name string) (uintptr, int64, error) {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	var p C.CUdeviceptr
	var n C.size_t
	err := check("cuModuleGetGlobal "+name, C.ft_module_global(ctx, &p, &n, m, cs))
	return uintptr(p), int64(n), err
}

func cFuncMaxSmem(ctx cContext, f cFunction, bytes int) error {
	return check("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", C.ft_func_max_smem(ctx, f, C.int(bytes)))
}

func cOccupancy(ctx cContext, f cFunction, block, smem int) (int, error) {
	var n C.int
	err := check("cuOccupancyMaxActiveBlocksPerMultiprocessor", C.ft_occupancy(ctx, &n, f, C.int(block), C.size_t(smem)))
	return int(n), err
}

func cFuncResources(ctx cContext, f cFunction) (regs, local int, err error) {
	var r, l C.int
	err = check("cuFuncGetAttribute(NUM_REGS, LOCAL_SIZE_BYTES)", C.ft_func_resources(ctx, f, &r, &l))
	return int(r), int(l), err
}

const maxLaunchArgs = C.FT_MAX_ARGS

func cLaunch(ctx cContext, f cFunction, grid, block [3]uint32, smem uint32, s cStream, args []uint64) C.CUresult {
	var p *C.uint64_t
	if len(args) > 0 {
		p = (*C.uint64_t)(unsafe.Pointer(&args[0]))
	}
	return C.ft_launch(ctx, f, C.uint(grid[0]), C.uint(grid[1]), C.uint(grid[2]),
		C.uint(block[0]), C.uint(block[1]), C.uint(block[2]), C.uint(smem), s, p, C.int(len(args)))
}

func cCaptureBegin(ctx cContext, s cStream) error {
	return check("cuStreamBeginCapture", C.ft_capture_begin(ctx, s))
}

func cCaptureEnd(ctx cContext, s cStream) (cGraph, error) {
	var g C.CUgraph
	err := check("cuStreamEndCapture", C.ft_capture_end(ctx, s, &g))
	return g, err
}

func cGraphInstantiate(ctx cContext, g cGraph) (cGraphExec, error) {
	var x C.CUgraphExec
	err := check("cuGraphInstantiate", C.ft_graph_instantiate(ctx, &x, g))
	return x, err
}

func cGraphLaunch(ctx cContext, x cGraphExec, s cStream) error {
	return check("cuGraphLaunch", C.ft_graph_launch(ctx, x, s))
}

func cGraphDestroy(ctx cContext, x cGraphExec, g cGraph) error {
	return check("destroying a CUDA graph", C.ft_graph_destroy(ctx, x, g))
}

func cGraphNodes(g cGraph) int { return int(C.ft_graph_nodes(g)) }

func cBLASCreate(ctx cContext, s cStream, ws uintptr, wsBytes int64) (cBLAS, error) {
	var h C.cublasHandle_t
	st := C.ft_blas_create(ctx, &h, s, C.CUdeviceptr(ws), C.size_t(wsBytes))
	return h, checkBLAS("creating a cuBLAS handle", st)
}

func cBLASDestroy(ctx cContext, h cBLAS) error {
	return checkBLAS("cublasDestroy", C.ft_blas_destroy(ctx, h))
}

func cGemmRowMajor(ctx cContext, h cBLAS, s cStream, c uintptr, cBF16 bool, a, b uintptr, m, n, k int) C.int {
	bf := C.int(0)
	if cBF16 {
		bf = 1
	}
	return C.ft_gemm_rm(ctx, h, s, C.CUdeviceptr(c), bf, C.CUdeviceptr(a), C.CUdeviceptr(b), C.int(m), C.int(n), C.int(k))
}

// nvrtcCompile compiles src (named name in messages) with opts to a cubin.
func nvrtcCompile(src, name string, opts []string) ([]byte, string, error) {
	csrc := C.CString(src)
	defer C.free(unsafe.Pointer(csrc))
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	copts := C.malloc(C.size_t(len(opts)+1) * C.size_t(unsafe.Sizeof(uintptr(0))))
	defer C.free(copts)
	arr := unsafe.Slice((**C.char)(copts), len(opts)+1)
	for i, o := range opts {
		arr[i] = C.CString(o)
	}
	defer func() {
		for i := range opts {
			C.free(unsafe.Pointer(arr[i]))
		}
	}()
	var image, log *C.char
	var n C.size_t
	r := C.ft_nvrtc(csrc, cname, (**C.char)(copts), C.int(len(opts)), &image, &n, &log)
	var logText string
	if log != nil {
		logText = C.GoString(log)
		C.free(unsafe.Pointer(log))
	}
	if r != 0 {
		if image != nil {
			C.free(unsafe.Pointer(image))
		}
		return nil, logText, &Error{Op: "compiling " + name + " with NVRTC", Lib: "NVRTC", Code: int(r), Msg: C.GoString(C.ft_nvrtc_status(r))}
	}
	out := C.GoBytes(unsafe.Pointer(image), C.int(n))
	C.free(unsafe.Pointer(image))
	return out, logText, nil
}

func nvrtcVersion() (int, int) {
	var major, minor C.int
	if C.ft_nvrtc_version(&major, &minor) != 0 {
		return 0, 0
	}
	return int(major), int(minor)
}

func driverVersion() int { return int(C.ft_driver_version()) }
