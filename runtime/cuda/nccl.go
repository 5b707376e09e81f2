//go:build cuda

package cuda

// NCCL, the collective library, loaded at run time with dlopen: no NCCL
// headers or link-time library are needed to build, and a machine without
// NCCL runs everything but a model sharded over several GPUs. The few types
// and prototypes used are declared here with the NCCL 2.x ABI.

/*
#cgo LDFLAGS: -ldl
#include <cuda.h>
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

// The NCCL 2.x ABI (nccl.h): a result code, an opaque communicator, the
// 128-byte unique id, the datatype and reduction enums as ints.
typedef int ft_ncclResult_t;
typedef void* ft_ncclComm_t;

typedef ft_ncclResult_t (*ft_nccl_get_version_fn)(int*);
typedef const char* (*ft_nccl_error_string_fn)(ft_ncclResult_t);
typedef const char* (*ft_nccl_last_error_fn)(ft_ncclComm_t);
typedef ft_ncclResult_t (*ft_nccl_init_all_fn)(ft_ncclComm_t*, int, const int*);
typedef ft_ncclResult_t (*ft_nccl_comm_fn)(ft_ncclComm_t);
typedef ft_ncclResult_t (*ft_nccl_async_error_fn)(ft_ncclComm_t, ft_ncclResult_t*);
typedef ft_ncclResult_t (*ft_nccl_all_reduce_fn)(const void*, void*, size_t, int, int, ft_ncclComm_t, CUstream);
typedef ft_ncclResult_t (*ft_nccl_all_gather_fn)(const void*, void*, size_t, int, ft_ncclComm_t, CUstream);

static void* ft_dlopen(const char* path) { return dlopen(path, RTLD_NOW | RTLD_LOCAL); }
static const char* ft_dlerror(void) { const char* e = dlerror(); return e ? e : "unknown dlopen error"; }
static void* ft_dlsym(void* h, const char* name) { return dlsym(h, name); }

static CUresult ft_nccl_ctx(CUcontext ctx) {
	CUcontext cur = NULL;
	CUresult r = cuCtxGetCurrent(&cur);
	if (r != CUDA_SUCCESS) return r;
	if (cur == ctx) return CUDA_SUCCESS;
	return cuCtxSetCurrent(ctx);
}

static int ft_nccl_get_version(void* fn, int* v) { return ((ft_nccl_get_version_fn)fn)(v); }
static const char* ft_nccl_error_string(void* fn, int r) { return ((ft_nccl_error_string_fn)fn)(r); }
static const char* ft_nccl_last_error(void* fn, void* comm) { return ((ft_nccl_last_error_fn)fn)(comm); }
static int ft_nccl_init_all(void* fn, void** comms, int n, const int* devs) {
	return ((ft_nccl_init_all_fn)fn)((ft_ncclComm_t*)comms, n, devs);
}
static int ft_nccl_comm(void* fn, void* comm) { return ((ft_nccl_comm_fn)fn)(comm); }
static int ft_nccl_async_error(void* fn, void* comm, int* e) { return ((ft_nccl_async_error_fn)fn)(comm, e); }

// The collectives make the device's context current on this thread first
// (-1 returned on a CUDA error, which *cuerr holds).
static int ft_nccl_all_reduce(void* fn, CUcontext ctx, CUresult* cuerr, CUdeviceptr buf, size_t count, int dtype, void* comm, CUstream s) {
	CUresult r = ft_nccl_ctx(ctx);
	if (r != CUDA_SUCCESS) { *cuerr = r; return -1; }
	return ((ft_nccl_all_reduce_fn)fn)((const void*)(uintptr_t)buf, (void*)(uintptr_t)buf, count, dtype, 0, comm, s);
}
static int ft_nccl_all_gather(void* fn, CUcontext ctx, CUresult* cuerr, CUdeviceptr src, CUdeviceptr dst, size_t count, int dtype, void* comm, CUstream s) {
	CUresult r = ft_nccl_ctx(ctx);
	if (r != CUDA_SUCCESS) { *cuerr = r; return -1; }
	return ((ft_nccl_all_gather_fn)fn)((const void*)(uintptr_t)src, (void*)(uintptr_t)dst, count, dtype, comm, s);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/flextensor-go/flextensor/runtime"
)

// The NCCL enums this package passes (nccl.h, NCCL 2.x).
const (
	ncclSuccess    = 0
	ncclInProgress = 7
	ncclFloat16    = 6
	ncclFloat32    = 7
	ncclBfloat16   = 9
	ncclSum        = 0
)

// ncclAPI is the loaded library: its path, version and entry points.
type ncclAPI struct {
	path                                string
	version                             int
	getVersion, errorString, lastError  unsafe.Pointer // lastError may be nil (NCCL < 2.13)
	initAll, destroy, abort, asyncError unsafe.Pointer
	allReduce, allGather                unsafe.Pointer
}

var loadNCCLOnce = sync.OnceValues(loadNCCL)

// ncclFinder is the python3 script that lists the libnccl files of pip's
// NVIDIA wheels (nvidia/nccl/lib, or nvidia/<cuXX>/lib in the CUDA 13
// layout; nvidia is a namespace package, so its __path__ and not __file__)
// and of torch's own lib directory, without importing torch.
const ncclFinder = `import glob, importlib.util, os
roots = []
try:
    import nvidia
    roots += list(nvidia.__path__)
except Exception:
    pass
spec = importlib.util.find_spec("torch")
if spec and spec.submodule_search_locations:
    roots += [os.path.join(p, "..") for p in spec.submodule_search_locations]
seen = set()
for r in roots:
    for pat in ("nccl/lib/libnccl.so.2", "*/lib/libnccl.so.2", "lib/libnccl.so.2", "nccl/lib/libnccl.so*", "*/lib/libnccl.so*"):
        for p in sorted(glob.glob(os.path.join(r, pat))):
            p = os.path.realpath(p)
            if p not in seen:
                seen.add(p)
                print(p)
`

// ncclCandidates lists where NCCL is looked for, in order, with how each was
// found: FT_NCCL_LIB, libnccl.so.2 on the loader's path, then the NCCL of
// PyTorch's wheels (nvidia-nccl-cu*) of the python3 on PATH.
func ncclCandidates() (paths, notes []string) {
	if p := os.Getenv("FT_NCCL_LIB"); p != "" {
		paths = append(paths, p)
	} else {
		notes = append(notes, "FT_NCCL_LIB is not set")
	}
	paths = append(paths, "libnccl.so.2", "libnccl.so")
	if py, err := exec.LookPath("python3"); err != nil {
		notes = append(notes, "no python3 on PATH to find the nvidia-nccl wheel")
	} else {
		out, err := exec.Command(py, "-c", ncclFinder).Output()
		found := false
		for _, line := range strings.Split(string(out), "\n") {
			if line = strings.TrimSpace(line); line != "" && err == nil {
				paths, found = append(paths, line), true
			}
		}
		if !found {
			notes = append(notes, fmt.Sprintf("%s finds no libnccl in its nvidia packages (pip's nvidia-nccl-cu12/cu13) nor beside torch", py))
		}
	}
	return paths, notes
}

func loadNCCL() (*ncclAPI, error) {
	paths, notes := ncclCandidates()
	var tried []string
	for _, p := range paths {
		cp := C.CString(p)
		h := C.ft_dlopen(cp)
		C.free(unsafe.Pointer(cp))
		if h == nil {
			tried = append(tried, fmt.Sprintf("%s (%s)", p, C.GoString(C.ft_dlerror())))
			continue
		}
		api, err := bindNCCL(h, p)
		if err != nil {
			tried = append(tried, err.Error())
			continue
		}
		return api, nil
	}
	return nil, fmt.Errorf("NCCL (libnccl.so.2) was not found; tried %s; %s. Install NCCL, or pip install nvidia-nccl-cu12 (cu13), or set FT_NCCL_LIB to the library's path",
		strings.Join(tried, "; "), strings.Join(notes, "; "))
}

func bindNCCL(h unsafe.Pointer, path string) (*ncclAPI, error) {
	sym := func(name string, required bool, dst *unsafe.Pointer, missing *[]string) {
		cn := C.CString(name)
		defer C.free(unsafe.Pointer(cn))
		*dst = C.ft_dlsym(h, cn)
		if *dst == nil && required {
			*missing = append(*missing, name)
		}
	}
	a := &ncclAPI{path: path}
	var missing []string
	for _, s := range []struct {
		name     string
		dst      *unsafe.Pointer
		required bool
	}{
		{"ncclGetVersion", &a.getVersion, true}, {"ncclGetErrorString", &a.errorString, true},
		{"ncclGetLastError", &a.lastError, false}, {"ncclCommInitAll", &a.initAll, true},
		{"ncclCommDestroy", &a.destroy, true}, {"ncclCommAbort", &a.abort, true},
		{"ncclCommGetAsyncError", &a.asyncError, true}, {"ncclAllReduce", &a.allReduce, true},
		{"ncclAllGather", &a.allGather, true},
	} {
		sym(s.name, s.required, s.dst, &missing)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%s lacks %s (not NCCL 2.x?)", path, strings.Join(missing, ", "))
	}
	var v C.int
	if r := C.ft_nccl_get_version(a.getVersion, &v); r != ncclSuccess {
		return nil, fmt.Errorf("%s: ncclGetVersion failed (%d)", path, int(r))
	}
	a.version = int(v)
	if a.version < 21000 { // bfloat16 collectives came with 2.10
		return nil, fmt.Errorf("%s is NCCL %s; want 2.10 or newer", path, formatNCCLVersion(a.version))
	}
	return a, nil
}

// formatNCCLVersion prints NCCL's version code (major·10000 + minor·100 +
// patch since 2.9) as "2.30.1".
func formatNCCLVersion(v int) string {
	return fmt.Sprintf("%d.%d.%d", v/10000, v/100%100, v%100)
}

// NCCLVersion loads NCCL (once) and reports its version code, its version
// as text ("2.30.1") and the path it was loaded from; the error says where
// it was looked for when it is absent.
func NCCLVersion() (int, string, error) {
	a, err := loadNCCLOnce()
	if err != nil {
		return 0, "", err
	}
	return a.version, formatNCCLVersion(a.version) + " (" + a.path + ")", nil
}

// check turns an NCCL result into an error with NCCL's message (and the
// communicator's last error, when the library has ncclGetLastError).
func (a *ncclAPI) check(op string, r C.int, comm unsafe.Pointer) error {
	if r == ncclSuccess {
		return nil
	}
	msg := C.GoString(C.ft_nccl_error_string(a.errorString, r))
	if a.lastError != nil {
		if last := C.GoString(C.ft_nccl_last_error(a.lastError, comm)); last != "" {
			msg += ": " + last
		}
	}
	return &Error{Op: op, Lib: "NCCL", Code: int(r), Msg: msg}
}

// DeviceCount is the number of CUDA devices present.
func DeviceCount() (int, error) {
	if err := initOnce(); err != nil {
		return 0, fmt.Errorf("the CUDA driver could not be initialised: %w", err)
	}
	return cu.NumDevices()
}

// ncclGroup is the state the ranks of one NewNCCLGroup share: an abort of
// one rank aborts every rank's communicator.
type ncclGroup struct {
	api     *ncclAPI
	mu      sync.Mutex
	ranks   []*ncclRank
	aborted error
}

// ncclRank is one rank of an NCCL group: a communicator on one device.
type ncclRank struct {
	g    *ncclGroup
	dev  *Device
	comm unsafe.Pointer
	rank int
	size int
	mu   sync.Mutex // serialises this rank's calls and Close
	// closed and aborted are written under the group's mutex (and closed
	// under mu too).
	closed, aborted bool
}

// NewNCCLGroup makes an NCCL communicator per device (ncclCommInitAll: one
// process, rank i on devs[i], which must be distinct GPUs of this build),
// NCCL loaded at the first call. Each rank's collectives run on the stream
// they are given, and may be called from any goroutine; the ranks must be
// called from different goroutines, each issuing its collectives in the
// same order (one goroutine per device, as decoder.Group runs its shards).
func NewNCCLGroup(devs []runtime.Device) ([]runtime.Communicator, error) {
	if len(devs) == 0 {
		return nil, errors.New("NCCL: no devices")
	}
	api, err := loadNCCLOnce()
	if err != nil {
		return nil, err
	}
	cds := make([]*Device, len(devs))
	ids := make([]C.int, len(devs))
	seen := map[int]bool{}
	for i, d := range devs {
		cd, ok := d.(*Device)
		if !ok {
			return nil, fmt.Errorf("NCCL: %s is not a CUDA device", d.Name())
		}
		if seen[cd.index] {
			return nil, fmt.Errorf("NCCL: %s is listed twice", cd.Name())
		}
		seen[cd.index] = true
		cds[i], ids[i] = cd, C.int(cd.index)
	}
	comms := (*[1 << 20]unsafe.Pointer)(C.calloc(C.size_t(len(devs)), C.size_t(unsafe.Sizeof(unsafe.Pointer(nil)))))
	defer C.free(unsafe.Pointer(comms))
	r := C.ft_nccl_init_all(api.initAll, (*unsafe.Pointer)(unsafe.Pointer(comms)), C.int(len(devs)), &ids[0])
	if err := api.check(fmt.Sprintf("ncclCommInitAll over %d devices", len(devs)), r, nil); err != nil {
		return nil, fmt.Errorf("NCCL %s: %w", formatNCCLVersion(api.version), err)
	}
	g := &ncclGroup{api: api}
	out := make([]runtime.Communicator, len(devs))
	for i := range devs {
		rk := &ncclRank{g: g, dev: cds[i], comm: comms[i], rank: i, size: len(devs)}
		g.ranks = append(g.ranks, rk)
		out[i] = rk
	}
	return out, nil
}

// Rank is this communicator's rank.
func (r *ncclRank) Rank() int { return r.rank }

// Size is the number of ranks.
func (r *ncclRank) Size() int { return r.size }

// ncclDType is NCCL's datatype of dt.
func ncclDType(dt runtime.DType) (C.int, error) {
	switch dt {
	case runtime.F32:
		return ncclFloat32, nil
	case runtime.BF16:
		return ncclBfloat16, nil
	case runtime.F16:
		return ncclFloat16, nil
	}
	return 0, fmt.Errorf("NCCL: dtype %v is not reduced (want F32, BF16 or F16)", dt)
}

// ready checks that the rank can run a collective of t on s.
func (r *ncclRank) ready(what string, s runtime.Stream, ts ...*runtime.Tensor) (*Stream, error) {
	r.g.mu.Lock()
	aborted := r.g.aborted
	r.g.mu.Unlock()
	if aborted != nil {
		return nil, aborted
	}
	if closed := r.closed; closed {
		return nil, fmt.Errorf("NCCL %s on %s: the communicator is closed", what, r.dev.Name())
	}
	cs, ok := s.(*Stream)
	if !ok || cs.dev != r.dev {
		return nil, fmt.Errorf("NCCL %s on %s: the stream is not one of this device's", what, r.dev.Name())
	}
	for _, t := range ts {
		if t == nil || t.Device() != runtime.Device(r.dev) {
			return nil, fmt.Errorf("NCCL %s on %s: tensor %v is not on this device", what, r.dev.Name(), t)
		}
	}
	return cs, nil
}

// AllReduceSum sums t over the ranks in place, enqueued on s.
func (r *ncclRank) AllReduceSum(t *runtime.Tensor, s runtime.Stream) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	cs, err := r.ready("all-reduce", s, t)
	if err != nil {
		return err
	}
	dt, err := ncclDType(t.DType())
	if err != nil {
		return err
	}
	var cuerr C.CUresult
	res := C.ft_nccl_all_reduce(r.g.api.allReduce, r.dev.ctx, &cuerr, C.CUdeviceptr(t.Ptr()), C.size_t(t.NumElements()), dt, r.comm, cs.s)
	if res == -1 {
		return check("cuCtxSetCurrent", cuerr)
	}
	if err := r.g.api.check("ncclAllReduce", res, r.comm); err != nil {
		return fmt.Errorf("%s: %w", r.dev.Name(), err)
	}
	return nil
}

// AllGather fills dst with every rank's src in rank order, enqueued on s.
func (r *ncclRank) AllGather(dst, src *runtime.Tensor, s runtime.Stream) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	cs, err := r.ready("all-gather", s, dst, src)
	if err != nil {
		return err
	}
	if dst.DType() != src.DType() || dst.NumElements() != src.NumElements()*r.size {
		return fmt.Errorf("NCCL all-gather on %s: %v into %v: want %d× the elements, same dtype", r.dev.Name(), src, dst, r.size)
	}
	// Bytes as uint8 (ncclUint8 = 1): any dtype gathers.
	var cuerr C.CUresult
	res := C.ft_nccl_all_gather(r.g.api.allGather, r.dev.ctx, &cuerr, C.CUdeviceptr(src.Ptr()), C.CUdeviceptr(dst.Ptr()), C.size_t(src.NumBytes()), 1, r.comm, cs.s)
	if res == -1 {
		return check("cuCtxSetCurrent", cuerr)
	}
	if err := r.g.api.check("ncclAllGather", res, r.comm); err != nil {
		return fmt.Errorf("%s: %w", r.dev.Name(), err)
	}
	return nil
}

// Abort aborts every rank's communicator (ncclCommAbort), so that kernels
// waiting for a rank that will not come stop; every later collective fails.
func (r *ncclRank) Abort(err error) {
	if err == nil {
		err = errors.New("aborted")
	}
	g := r.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.aborted != nil {
		return
	}
	g.aborted = fmt.Errorf("%w by rank %d (%s): %w", runtime.ErrCommAborted, r.rank, r.dev.Name(), err)
	for _, rk := range g.ranks {
		if !rk.closed && !rk.aborted {
			rk.aborted = true
			_ = withDeviceCtx(rk.dev, func() error { return g.api.check("ncclCommAbort", C.ft_nccl_comm(g.api.abort, rk.comm), nil) })
		}
	}
}

// Close destroys this rank's communicator (after its device's work is
// done). A second Close, or a Close after Abort, does nothing.
func (r *ncclRank) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.g.mu.Lock()
	defer r.g.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	if r.aborted { // ncclCommAbort freed it
		return nil
	}
	comm := r.comm
	var async C.int
	err := withDeviceCtx(r.dev, func() error {
		if e := r.g.api.check("ncclCommGetAsyncError", C.ft_nccl_async_error(r.g.api.asyncError, comm, &async), comm); e != nil {
			return e
		}
		if async != ncclSuccess && async != ncclInProgress {
			e := r.g.api.check("an earlier collective", async, comm)
			_ = r.g.api.check("ncclCommAbort", C.ft_nccl_comm(r.g.api.abort, comm), nil)
			return e
		}
		return r.g.api.check("ncclCommDestroy", C.ft_nccl_comm(r.g.api.destroy, comm), nil)
	})
	if err != nil {
		return fmt.Errorf("NCCL rank %d on %s: %w", r.rank, r.dev.Name(), err)
	}
	return nil
}

// withDeviceCtx runs f on a locked OS thread with dev's context current (for
// the NCCL calls that take no stream).
func withDeviceCtx(dev *Device, f func() error) error { return dev.withCtx(f) }
