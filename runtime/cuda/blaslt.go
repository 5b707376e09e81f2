//go:build cuda

package cuda

// cuBLASLt, for FP8 (E4M3) tensor-core GEMMs, loaded at run time with
// dlopen like NCCL: the build needs no cublasLt header nor link-time
// library, and a machine whose cuBLAS comes without cuBLASLt (or a GPU
// older than sm_89) runs everything but this path. The types, enums and
// entry points are declared in cublaslt_api.h (shared with gemmtune.go)
// with their numeric values from cublasLt.h / library_types.h /
// cublas_api.h (stable ABI since CUDA 11.8, where FP8 appeared:
// CUDA_R_8F_E4M3 = 28).

/*
#cgo LDFLAGS: -ldl
#define _GNU_SOURCE
#include <stdlib.h>
#include "cublaslt_api.h"

// A symbol of the cuBLAS the build links, to find its directory.
extern int cublasCreate_v2(void** handle);

// The FP8-only values (the rest are in cublaslt_api.h).
enum {
	// cublasLtMatmulDescAttributes_t
	FT_LT_DESC_FAST_ACCUM = 25,
	FT_LT_DESC_A_SCALE_POINTER = 17, FT_LT_DESC_B_SCALE_POINTER = 18,
	FT_LT_DESC_A_SCALE_MODE = 31, FT_LT_DESC_B_SCALE_MODE = 32, // cuBLAS 12.9+
	// cublasLtMatmulMatrixScale_t (cuBLAS 12.9+): one fp32 scale per row of
	// op(A) and per column of op(B).
	FT_LT_SCALE_OUTER_VEC_32F = 3,
};

static void* ft_lt_dlopen(const char* path) { return dlopen(path, RTLD_NOW | RTLD_LOCAL); }
static const char* ft_lt_dlerror(void) { const char* e = dlerror(); return e ? e : "unknown dlopen error"; }

// ft_lt_cublas_path is the file the linked cuBLAS was loaded from, or NULL.
static const char* ft_lt_cublas_path(void) {
	Dl_info info;
	if (dladdr((void*)&cublasCreate_v2, &info) == 0) return NULL;
	return info.dli_fname;
}

static size_t ft_lt_version(void) { return ft_lt.version(); }

// ft_lt_plan is one GEMM shape's descriptors and the algorithm the
// heuristic chose for it.
typedef struct {
	void *desc, *la, *lb, *ld;
	ft_lt_algo algo;
	size_t ws;
	int outer; // the scale modes are OUTER_VEC_32F: ft_lt_run sets the scale pointers
} ft_lt_plan;

static void ft_lt_plan_free(ft_lt_plan* p) {
	if (!p) return;
	if (p->ld) ft_lt.layout_destroy(p->ld);
	if (p->lb) ft_lt.layout_destroy(p->lb);
	if (p->la) ft_lt.layout_destroy(p->la);
	if (p->desc) ft_lt.desc_destroy(p->desc);
	free(p);
}

// ft_lt_make_plan describes, column-major as cuBLASLt sees memory, the
// row-major product out[M,N] = x[M,K]·w[N,K]ᵀ (see BLAS.GemmFP8) and asks
// the heuristic for an algorithm: A = w's memory, column-major [K,N] (ld
// K), transposed; B = x's memory, column-major [K,M] (ld K), as it is;
// D = C = out's memory, column-major [N,M] (ld N), in dtype. With outer,
// A's and B's scale modes are OUTER_VEC_32F: D[n,m] = sw[n]·sx[m]·Σ, the
// scale vectors given to ft_lt_run. On failure *what names the call that
// failed.
static int ft_lt_make_plan(CUcontext ctx, void* h, int M, int N, int K, int dtype, int fast, int outer, CUdeviceptr stand,
		uint32_t alignX, uint32_t alignW, uint32_t alignOut, uint64_t wsMax, ft_lt_plan** out, const char** what) {
	*out = NULL;
	*what = "cuCtxSetCurrent";
	if (ft_lt_ctx(ctx) != CUDA_SUCCESS) return -1;
	ft_lt_plan* p = (ft_lt_plan*)calloc(1, sizeof(ft_lt_plan));
	void* pref = NULL;
	int st = 0;
	const int32_t opT = FT_LT_OP_T, opN = FT_LT_OP_N;
	const int8_t fa = fast ? 1 : 0;
	ft_lt_heur res;
	int nres = 0;
	if (!p) { *what = "calloc"; return FT_LT_STATUS_NOT_SUPPORTED; }
#define FT_LT_TRY(call, name) do { *what = name; st = (call); if (st != 0) goto fail; } while (0)
	FT_LT_TRY(ft_lt.desc_create(&p->desc, FT_LT_COMPUTE_32F, FT_LT_CUDA_R_32F), "cublasLtMatmulDescCreate");
	FT_LT_TRY(ft_lt.desc_set(p->desc, FT_LT_DESC_TRANSA, &opT, sizeof opT), "cublasLtMatmulDescSetAttribute(TRANSA)");
	FT_LT_TRY(ft_lt.desc_set(p->desc, FT_LT_DESC_TRANSB, &opN, sizeof opN), "cublasLtMatmulDescSetAttribute(TRANSB)");
	FT_LT_TRY(ft_lt.desc_set(p->desc, FT_LT_DESC_FAST_ACCUM, &fa, sizeof fa), "cublasLtMatmulDescSetAttribute(FAST_ACCUM)");
	if (outer) {
		const int32_t mode = FT_LT_SCALE_OUTER_VEC_32F;
		FT_LT_TRY(ft_lt.desc_set(p->desc, FT_LT_DESC_A_SCALE_MODE, &mode, sizeof mode), "cublasLtMatmulDescSetAttribute(A_SCALE_MODE)");
		FT_LT_TRY(ft_lt.desc_set(p->desc, FT_LT_DESC_B_SCALE_MODE, &mode, sizeof mode), "cublasLtMatmulDescSetAttribute(B_SCALE_MODE)");
		// Vector scale modes need scale vectors set before the heuristic:
		// without them cuBLASLt 13.1 refused every shape on the H200
		// (status 7, INVALID_VALUE); with them it takes every shape (s31d).
		// A stand-in address (16-byte aligned, never read here) until
		// ft_lt_run sets the real ones at each call.
		const void* sp = (const void*)stand;
		FT_LT_TRY(ft_lt.desc_set(p->desc, FT_LT_DESC_A_SCALE_POINTER, &sp, sizeof sp), "cublasLtMatmulDescSetAttribute(A_SCALE_POINTER)");
		FT_LT_TRY(ft_lt.desc_set(p->desc, FT_LT_DESC_B_SCALE_POINTER, &sp, sizeof sp), "cublasLtMatmulDescSetAttribute(B_SCALE_POINTER)");
		p->outer = 1;
	}
	FT_LT_TRY(ft_lt.layout_create(&p->la, FT_LT_CUDA_R_8F_E4M3, (uint64_t)K, (uint64_t)N, (int64_t)K), "cublasLtMatrixLayoutCreate(w)");
	FT_LT_TRY(ft_lt.layout_create(&p->lb, FT_LT_CUDA_R_8F_E4M3, (uint64_t)K, (uint64_t)M, (int64_t)K), "cublasLtMatrixLayoutCreate(x)");
	FT_LT_TRY(ft_lt.layout_create(&p->ld, dtype, (uint64_t)N, (uint64_t)M, (int64_t)N), "cublasLtMatrixLayoutCreate(out)");
	FT_LT_TRY(ft_lt.pref_create(&pref), "cublasLtMatmulPreferenceCreate");
	FT_LT_TRY(ft_lt.pref_set(pref, FT_LT_PREF_MAX_WORKSPACE_BYTES, &wsMax, sizeof wsMax), "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)");
	FT_LT_TRY(ft_lt.pref_set(pref, FT_LT_PREF_MIN_ALIGNMENT_A_BYTES, &alignW, sizeof alignW), "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_A_BYTES)");
	FT_LT_TRY(ft_lt.pref_set(pref, FT_LT_PREF_MIN_ALIGNMENT_B_BYTES, &alignX, sizeof alignX), "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_B_BYTES)");
	FT_LT_TRY(ft_lt.pref_set(pref, FT_LT_PREF_MIN_ALIGNMENT_C_BYTES, &alignOut, sizeof alignOut), "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_C_BYTES)");
	FT_LT_TRY(ft_lt.pref_set(pref, FT_LT_PREF_MIN_ALIGNMENT_D_BYTES, &alignOut, sizeof alignOut), "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_D_BYTES)");
	FT_LT_TRY(ft_lt.heuristic(h, p->desc, p->la, p->lb, p->ld, p->ld, pref, 1, &res, &nres), "cublasLtMatmulAlgoGetHeuristic");
#undef FT_LT_TRY
	if (nres < 1 || res.state != 0) {
		*what = "cublasLtMatmulAlgoGetHeuristic (no algorithm for this shape and these types)";
		st = FT_LT_STATUS_NOT_SUPPORTED;
		goto fail;
	}
	ft_lt.pref_destroy(pref);
	p->algo = res.algo;
	p->ws = res.workspaceSize;
	*out = p;
	return 0;
fail:
	if (pref) ft_lt.pref_destroy(pref);
	ft_lt_plan_free(p);
	return st;
}

static size_t ft_lt_plan_ws(ft_lt_plan* p) { return p->ws; }

// ft_lt_run enqueues the planned product on s: out = x·wᵀ (row-major),
// alpha 1, beta 0 (C is D, never read); for an outer plan, scaled by sw
// (one fp32 per output channel) and sx (one per token), which are written
// into the descriptor first (cublasLtMatmul reads them at the call).
static int ft_lt_run(CUcontext ctx, void* h, ft_lt_plan* p, CUdeviceptr out, CUdeviceptr x, CUdeviceptr w,
		CUdeviceptr sx, CUdeviceptr sw, CUdeviceptr ws, size_t wsBytes, CUstream s) {
	if (ft_lt_ctx(ctx) != CUDA_SUCCESS) return -1;
	const float alpha = 1.0f, beta = 0.0f;
	if (p->outer) {
		const void* pa = (const void*)sw;
		const void* pb = (const void*)sx;
		int st = ft_lt.desc_set(p->desc, FT_LT_DESC_A_SCALE_POINTER, &pa, sizeof pa);
		if (st == 0) st = ft_lt.desc_set(p->desc, FT_LT_DESC_B_SCALE_POINTER, &pb, sizeof pb);
		if (st != 0) return st;
	}
	return ft_lt.matmul(h, p->desc, &alpha, (const void*)w, p->la, (const void*)x, p->lb, &beta,
		(const void*)out, p->ld, (void*)out, p->ld, &p->algo, (void*)ws, wsBytes, s);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"
)

// ErrFP8Unsupported wraps the errors of GemmFP8 and FP8Ready that mean the
// FP8 GEMM cannot run here (no cuBLASLt, a GPU older than sm_89, a shape or
// alignment cuBLASLt has no algorithm for), as opposed to a failed launch:
// a caller can fall back to another path.
var ErrFP8Unsupported = errors.New("FP8 GEMM unsupported")

// ltLib is the loaded cuBLASLt: where from and its version.
type ltLib struct {
	path    string
	version int // cublasLtGetVersion: major·10000 + minor·100 + patch
}

var loadLtOnce = sync.OnceValues(loadCublasLt)

// ltCandidates lists where cuBLASLt is looked for: beside the cuBLAS this
// build links (libcublasLt.so.13, .12, .11 in its directory), then the same
// names on the loader's path (already loaded as cuBLAS's own dependency, as
// a rule).
func ltCandidates() []string {
	names := []string{"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so.11"}
	var out []string
	if p := C.ft_lt_cublas_path(); p != nil {
		if dir := filepath.Dir(C.GoString(p)); dir != "" && dir != "." {
			for _, n := range names {
				out = append(out, filepath.Join(dir, n))
			}
		}
	}
	return append(append(out, names...), "libcublasLt.so")
}

func loadCublasLt() (*ltLib, error) {
	var tried []string
	for _, p := range ltCandidates() {
		cp := C.CString(p)
		h := C.ft_lt_dlopen(cp)
		C.free(unsafe.Pointer(cp))
		if h == nil {
			tried = append(tried, fmt.Sprintf("%s (%s)", p, C.GoString(C.ft_lt_dlerror())))
			continue
		}
		if missing := C.ft_lt_bind(h); missing != nil {
			tried = append(tried, fmt.Sprintf("%s lacks %s", p, C.GoString(missing)))
			continue
		}
		lib := &ltLib{path: p, version: int(C.ft_lt_version())}
		if lib.version < 110800 {
			tried = append(tried, fmt.Sprintf("%s is cuBLASLt %d, before FP8 (11.8)", p, lib.version))
			continue
		}
		if os.Getenv("FT_TRACE") == "1" {
			fmt.Fprintf(os.Stderr, "trace: cuBLASLt %d loaded from %s\n", lib.version, p)
		}
		return lib, nil
	}
	return nil, fmt.Errorf("cuBLASLt was not found: tried %s", strings.Join(tried, "; "))
}

// blasLt is a BLAS's cuBLASLt handle and its plans, one per GEMM shape.
type blasLt struct {
	once  sync.Once
	err   error // why FP8 GEMMs cannot run (wraps ErrFP8Unsupported)
	h     unsafe.Pointer
	mu    sync.Mutex
	plans map[ltKey]*C.ft_lt_plan
	bad   map[ltKey]error // shapes the heuristic refused
}

// ltKey is what a plan depends on: the shape, the output type, fast
// accumulation, outer-vector scales and the operands' alignments (the
// heuristic's minimums).
type ltKey struct {
	m, n, k                int
	bf16, fast, outer      bool
	alignX, alignW, alignC uint32
}

// init creates the handle once: cuBLASLt loaded, an sm_89+ GPU.
func (l *blasLt) init(d *Device) error {
	l.once.Do(func() {
		lib, err := loadLtOnce()
		if err != nil {
			l.err = fmt.Errorf("%w: %v", ErrFP8Unsupported, err)
			return
		}
		if d.cc < 89 {
			l.err = fmt.Errorf("%w: %s is sm_%d; FP8 tensor cores need sm_89 or newer", ErrFP8Unsupported, d.Name(), d.cc)
			return
		}
		var h unsafe.Pointer
		if st := C.ft_lt_create(d.ctx, &h); st != 0 {
			l.err = fmt.Errorf("%w: cublasLtCreate (%s): %s (status %d)", ErrFP8Unsupported, lib.path, C.GoString(C.ft_lt_status(st)), int(st))
			return
		}
		l.h = h
		l.plans = map[ltKey]*C.ft_lt_plan{}
		l.bad = map[ltKey]error{}
	})
	return l.err
}

func (l *blasLt) close(d *Device) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.h == nil {
		return nil
	}
	for k, p := range l.plans {
		C.ft_lt_plan_free(p)
		delete(l.plans, k)
	}
	st := C.ft_lt_destroy(d.ctx, l.h)
	l.h = nil
	if st != 0 {
		return &Error{Op: "cublasLtDestroy", Lib: "cuBLAS", Code: int(st), Msg: C.GoString(C.ft_lt_status(st))}
	}
	return nil
}

// refuse drops key's plan and records err as why it cannot run.
func (l *blasLt) refuse(key ltKey, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p := l.plans[key]; p != nil {
		C.ft_lt_plan_free(p)
		delete(l.plans, key)
	}
	l.bad[key] = err
}

// align is the largest power of two up to 256 that divides p.
func align(p uintptr) uint32 {
	a := uint32(256)
	for a > 1 && p%uintptr(a) != 0 {
		a >>= 1
	}
	return a
}

// plan returns the cached plan of key, making it (descriptors, layouts,
// the heuristic's algorithm) on first use.
func (b *BLAS) ltPlan(key ltKey) (*C.ft_lt_plan, error) {
	l := &b.lt
	if err := l.init(b.dev); err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.h == nil {
		return nil, fmt.Errorf("%w: the cuBLASLt handle is closed", ErrFP8Unsupported)
	}
	if p := l.plans[key]; p != nil {
		return p, nil
	}
	if err := l.bad[key]; err != nil {
		return nil, err
	}
	dt := C.int(C.FT_LT_CUDA_R_32F)
	if key.bf16 {
		dt = C.FT_LT_CUDA_R_16BF
	}
	fast, outer := C.int(0), C.int(0)
	if key.fast {
		fast = 1
	}
	if key.outer {
		outer = 1
	}
	var p *C.ft_lt_plan
	var what *C.char
	st := C.ft_lt_make_plan(b.dev.ctx, l.h, C.int(key.m), C.int(key.n), C.int(key.k), dt, fast, outer, C.CUdeviceptr(b.ws.Ptr()),
		C.uint32_t(key.alignX), C.uint32_t(key.alignW), C.uint32_t(key.alignC), C.uint64_t(blasWorkspace), &p, &what)
	if st != 0 {
		err := fmt.Errorf("%w: cuBLASLt FP8 GEMM [%d,%d]x[%d,%d]T%s: %s: %s (status %d)", ErrFP8Unsupported,
			key.m, key.k, key.n, key.k, key.scaled(), C.GoString(what), C.GoString(C.ft_lt_status(st)), int(st))
		l.bad[key] = err
		return nil, err
	}
	if ws := int64(C.ft_lt_plan_ws(p)); ws > blasWorkspace {
		C.ft_lt_plan_free(p)
		err := fmt.Errorf("%w: cuBLASLt FP8 GEMM [%d,%d]x[%d,%d]T wants %d bytes of workspace, more than the %d the handle has",
			ErrFP8Unsupported, key.m, key.k, key.n, key.k, ws, blasWorkspace)
		l.bad[key] = err
		return nil, err
	}
	l.plans[key] = p
	return p, nil
}

// scaled names an outer-scaled key in messages.
func (k ltKey) scaled() string {
	if k.outer {
		return " with outer-vector scales"
	}
	return ""
}

func fp8Key(c uintptr, cBF16 bool, a, w uintptr, m, n, k int, fastAccum bool) (ltKey, error) {
	switch {
	case m <= 0 || n <= 0 || k <= 0:
		return ltKey{}, fmt.Errorf("cuBLASLt FP8 GEMM %dx%dx%d: sizes must be positive", m, n, k)
	case k%16 != 0 || n%16 != 0:
		return ltKey{}, fmt.Errorf("%w: cuBLASLt FP8 GEMM %dx%dx%d: k and n must be multiples of 16", ErrFP8Unsupported, m, n, k)
	case a%16 != 0 || w%16 != 0 || c%16 != 0:
		return ltKey{}, fmt.Errorf("%w: cuBLASLt FP8 GEMM: operands must be 16-byte aligned (x %#x, w %#x, out %#x)", ErrFP8Unsupported, a, w, c)
	}
	return ltKey{m: m, n: n, k: k, bf16: cBF16, fast: fastAccum, alignX: align(a), alignW: align(w), alignC: align(c)}, nil
}

// FP8Ready reports whether GemmFP8 can run with these arguments, preparing
// (and caching) its plan: nil, or an error wrapping ErrFP8Unsupported that
// says why not. It enqueues nothing.
func (b *BLAS) FP8Ready(c uintptr, cBF16 bool, a, w uintptr, m, n, k int, fastAccum bool) error {
	key, err := fp8Key(c, cBF16, a, w, m, n, k, fastAccum)
	if err != nil {
		return err
	}
	_, err = b.ltPlan(key)
	return err
}

// GemmFP8 enqueues on s, row-major, c[m,n] = a[m,k]·w[n,k]ᵀ with a and w
// E4M3 codes (a: m rows of quantized activations, w: the weights), fp32
// accumulation and c in bf16 (cBF16) or fp32; no scales are applied (the
// caller multiplies by its per-token and per-channel scales). k and n must
// be multiples of 16 and every operand 16-byte aligned; fastAccum skips
// cuBLASLt's periodic promotion of the tensor-core partial sums to fp32
// (faster, less accurate). Arguments are device addresses.
//
// cuBLASLt is column-major and FP8 takes only the "TN" form (A transposed,
// B not): the row-major c[m,n] is the column-major D[n,m] = Wᵀᵀ·Xᵀ where
// w's memory is the column-major [k,n] matrix Wᵀ (A, ld k, transposed to
// [n,k]) and a's memory the column-major [k,m] matrix Xᵀ (B, ld k, as it
// is), D with ld n. The handle's workspace (the cuBLAS one, used in stream
// order) is passed, so a captured graph allocates nothing; the descriptors
// and algorithm are made once per shape and alignment.
func (b *BLAS) GemmFP8(s *Stream, c uintptr, cBF16 bool, a, w uintptr, m, n, k int, fastAccum bool) error {
	key, err := fp8Key(c, cBF16, a, w, m, n, k, fastAccum)
	if err != nil {
		return err
	}
	return b.gemmFP8(s, key, c, a, w, 0, 0)
}

// gemmFP8 runs key's plan; sx and sw are the scale vectors of an outer key.
func (b *BLAS) gemmFP8(s *Stream, key ltKey, c, a, w, sx, sw uintptr) error {
	m, n, k, cBF16 := key.m, key.n, key.k, key.bf16
	p, err := b.ltPlan(key)
	if err != nil {
		return err
	}
	cBytes := int64(2)
	if !cBF16 {
		cBytes = 4
	}
	bytes := int64(m)*int64(k) + int64(n)*int64(k) + cBytes*int64(m)*int64(n)
	name := fmt.Sprintf("cublasLtMatmul fp8[m=%d,n=%d,k=%d]", m, n, k)
	if key.outer {
		bytes += 4 * int64(m+n)
		name = fmt.Sprintf("cublasLtMatmul fp8 scaled[m=%d,n=%d,k=%d]", m, n, k)
	}
	return b.dev.timed(s, name, bytes, func() error {
		st := C.ft_lt_run(b.dev.ctx, b.lt.h, p, C.CUdeviceptr(c), C.CUdeviceptr(a), C.CUdeviceptr(w),
			C.CUdeviceptr(sx), C.CUdeviceptr(sw), C.CUdeviceptr(b.ws.Ptr()), C.size_t(blasWorkspace), s.s)
		if st == 0 {
			return nil
		}
		err := fmt.Errorf("%s: cublasLtMatmul fp8 [%d,%d]x[%d,%d]T%s: %s (cuBLAS status %d)", b.dev.Name(), m, k, n, k, key.scaled(), C.GoString(C.ft_lt_status(st)), int(st))
		if st == C.FT_LT_STATUS_NOT_SUPPORTED || st == C.FT_LT_STATUS_INVALID_VALUE {
			// Refused before launching anything: this shape falls back from
			// now on.
			err = fmt.Errorf("%w: %v", ErrFP8Unsupported, err)
			b.lt.refuse(key, err)
		}
		return err
	})
}

// CublasLtOuterScaleVersion is the first cuBLASLt version (12.9) with
// outer-vector scaling (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F).
const CublasLtOuterScaleVersion = 120900

// FP8OuterScales reports whether GemmFP8Scaled can run on this device: nil,
// or an error wrapping ErrFP8Unsupported that says why not. Outer-vector
// FP8 scaling needs cuBLASLt 12.9 or newer and, as NVIDIA documents it
// (cuBLAS's table of scaling modes), an sm_90 GPU (Hopper); Ada (sm_89)
// and Blackwell take per-tensor or block scales only. A shape the
// heuristic still refuses is reported by FP8ScaledReady.
func (b *BLAS) FP8OuterScales() error {
	if err := b.lt.init(b.dev); err != nil {
		return err
	}
	lib, err := loadLtOnce()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrFP8Unsupported, err)
	}
	if lib.version < CublasLtOuterScaleVersion {
		return fmt.Errorf("%w: cuBLASLt %d (%s) predates outer-vector FP8 scales (%d)", ErrFP8Unsupported, lib.version, lib.path, CublasLtOuterScaleVersion)
	}
	if b.dev.cc != 90 {
		return fmt.Errorf("%w: %s is sm_%d; cuBLASLt's outer-vector FP8 scales run on sm_90 only", ErrFP8Unsupported, b.dev.Name(), b.dev.cc)
	}
	return nil
}

func fp8ScaledKey(c uintptr, cBF16 bool, a, w, sx, sw uintptr, m, n, k int, fastAccum bool) (ltKey, error) {
	key, err := fp8Key(c, cBF16, a, w, m, n, k, fastAccum)
	if err != nil {
		return key, err
	}
	if sx == 0 || sw == 0 || sx%16 != 0 || sw%16 != 0 {
		return key, fmt.Errorf("%w: cuBLASLt FP8 GEMM: scale vectors must be 16-byte aligned (x's %#x, w's %#x)", ErrFP8Unsupported, sx, sw)
	}
	key.outer = true
	return key, nil
}

// FP8ScaledReady is FP8Ready for GemmFP8Scaled: it also checks
// FP8OuterScales and that the heuristic has an algorithm with outer-vector
// scales for this shape.
func (b *BLAS) FP8ScaledReady(c uintptr, cBF16 bool, a, w, sx, sw uintptr, m, n, k int, fastAccum bool) error {
	if err := b.FP8OuterScales(); err != nil {
		return err
	}
	key, err := fp8ScaledKey(c, cBF16, a, w, sx, sw, m, n, k, fastAccum)
	if err != nil {
		return err
	}
	_, err = b.ltPlan(key)
	return err
}

// GemmFP8Scaled is GemmFP8 with the scales applied by cuBLASLt (outer-vector
// scaling): c[i,j] = sx[i]·sw[j]·Σ_k a[i,k]·w[j,k], with sx m fp32 scales
// (one per row of a: the tokens) and sw n fp32 scales (one per row of w:
// the output channels), both 16-byte aligned device addresses. Where
// FP8OuterScales or the heuristic says no, it returns an error wrapping
// ErrFP8Unsupported before enqueuing anything (the caller then runs
// GemmFP8 and applies the scales itself).
func (b *BLAS) GemmFP8Scaled(s *Stream, c uintptr, cBF16 bool, a, w, sx, sw uintptr, m, n, k int, fastAccum bool) error {
	if err := b.FP8OuterScales(); err != nil {
		return err
	}
	key, err := fp8ScaledKey(c, cBF16, a, w, sx, sw, m, n, k, fastAccum)
	if err != nil {
		return err
	}
	return b.gemmFP8(s, key, c, a, w, sx, sw)
}
