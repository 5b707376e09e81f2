//go:build cuda

package cuda

// BF16 GEMMs through cuBLASLt with the algorithm chosen by measurement
// (GemmBF16Tuned). For each distinct shape (sizes, output type, beta,
// operand alignments) the first eager call asks cublasLtMatmulAlgoGetHeuristic
// for up to gemmTuneCandidates algorithms, times each of them and
// cublasGemmEx (today's path) on the call's own operands between CUDA events,
// and keeps the fastest; later calls, captured into a graph or not, run the
// kept choice. A shape first seen while its stream is being captured runs
// cublasGemmEx untuned (nothing can be timed inside a capture) and is tuned
// at its first eager call.
//
// cuBLASLt is the library blaslt.go finds and loads (loadLtOnce); this file
// binds its own copy of cublaslt_api.h's table from the same file (dlopen
// of a loaded library returns it).

/*
#cgo LDFLAGS: -ldl
#include <cublas_v2.h>
#include <stdio.h>
#include <stdlib.h>
#include "cublaslt_api.h"

// The values only the tuner uses (the rest are in cublaslt_api.h).
enum {
	// cublasLtMatmulAlgoConfigAttributes_t
	FT_BT_ALGO_ID = 0, FT_BT_ALGO_TILE = 1, FT_BT_ALGO_SPLITK = 2, FT_BT_ALGO_REDUCTION = 3,
	FT_BT_ALGO_SWIZZLE = 4, FT_BT_ALGO_CUSTOM = 5, FT_BT_ALGO_STAGES = 6,
	FT_BT_MAX_CANDIDATES = 16,
};

// ft_bt_bind fills ft_lt (cublaslt_api.h) from the library at path
// (already loaded by blaslt.go); it returns NULL or what went wrong.
static const char* ft_bt_bind(const char* path) {
	static char msg[160];
	void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) { const char* e = dlerror(); return e ? e : "dlopen failed"; }
	const char* missing = ft_lt_bind(h);
	if (!missing) return NULL;
	snprintf(msg, sizeof msg, "missing %s", missing);
	return msg;
}

// ft_bt_capturing is 1 while s is being captured into a graph, 0 when not,
// and a negative CUresult when the query fails.
static int ft_bt_capturing(CUcontext ctx, CUstream s) {
	CUresult r = ft_lt_ctx(ctx);
	if (r != CUDA_SUCCESS) return -(int)r;
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	r = cuStreamIsCapturing(s, &st);
	if (r != CUDA_SUCCESS) return -(int)r;
	return st != CU_STREAM_CAPTURE_STATUS_NONE;
}

// ft_bt_plan is one shape's descriptors (the row-major out[M,N] =
// x[M,K]·w[N,K]ᵀ as the column-major D[N,M] = Wᵀᵀ·Xᵀ: A = w's memory [K,N]
// ld K transposed, B = x's memory [K,M] ld K, C = D = out's memory [N,M]
// ld N) and its algorithm.
typedef struct {
	void *desc, *la, *lb, *ld;
	ft_lt_algo algo;
	size_t ws;
	float beta;
} ft_bt_plan;

static void ft_bt_plan_free(ft_bt_plan* p) {
	if (!p) return;
	if (p->ld) ft_lt.layout_destroy(p->ld);
	if (p->lb) ft_lt.layout_destroy(p->lb);
	if (p->la) ft_lt.layout_destroy(p->la);
	if (p->desc) ft_lt.desc_destroy(p->desc);
	free(p);
}

// ft_bt_make_plan makes the descriptors of a shape and asks the heuristic
// for up to want (≤ FT_BT_MAX_CANDIDATES) algorithms that fit wsMax bytes
// of workspace and the operands' alignments, written to res (*nres of
// them); want 0 makes the descriptors only. On failure *what names the
// call that failed.
static int ft_bt_make_plan(CUcontext ctx, void* h, int M, int N, int K, int dtype, int acc,
		uint32_t alignX, uint32_t alignW, uint32_t alignOut, uint64_t wsMax, int want,
		ft_bt_plan** out, ft_lt_heur* res, int* nres, const char** what) {
	*out = NULL;
	*nres = 0;
	*what = "cuCtxSetCurrent";
	if (ft_lt_ctx(ctx) != CUDA_SUCCESS) return -1;
	if (want > FT_BT_MAX_CANDIDATES) want = FT_BT_MAX_CANDIDATES;
	ft_bt_plan* p = (ft_bt_plan*)calloc(1, sizeof(ft_bt_plan));
	void* pref = NULL;
	int st = 0;
	const int32_t opT = FT_LT_OP_T, opN = FT_LT_OP_N;
	if (!p) { *what = "calloc"; return FT_LT_STATUS_NOT_SUPPORTED; }
	p->beta = acc ? 1.0f : 0.0f;
#define FT_BT_TRY(call, name) do { *what = name; st = (call); if (st != 0) goto fail; } while (0)
	FT_BT_TRY(ft_lt.desc_create(&p->desc, FT_LT_COMPUTE_32F, FT_LT_CUDA_R_32F), "cublasLtMatmulDescCreate");
	FT_BT_TRY(ft_lt.desc_set(p->desc, FT_LT_DESC_TRANSA, &opT, sizeof opT), "cublasLtMatmulDescSetAttribute(TRANSA)");
	FT_BT_TRY(ft_lt.desc_set(p->desc, FT_LT_DESC_TRANSB, &opN, sizeof opN), "cublasLtMatmulDescSetAttribute(TRANSB)");
	FT_BT_TRY(ft_lt.layout_create(&p->la, FT_LT_CUDA_R_16BF, (uint64_t)K, (uint64_t)N, (int64_t)K), "cublasLtMatrixLayoutCreate(w)");
	FT_BT_TRY(ft_lt.layout_create(&p->lb, FT_LT_CUDA_R_16BF, (uint64_t)K, (uint64_t)M, (int64_t)K), "cublasLtMatrixLayoutCreate(x)");
	FT_BT_TRY(ft_lt.layout_create(&p->ld, dtype, (uint64_t)N, (uint64_t)M, (int64_t)N), "cublasLtMatrixLayoutCreate(out)");
	if (want <= 0) { // descriptors only: the caller sets the algorithm
		*out = p;
		return 0;
	}
	FT_BT_TRY(ft_lt.pref_create(&pref), "cublasLtMatmulPreferenceCreate");
	FT_BT_TRY(ft_lt.pref_set(pref, FT_LT_PREF_MAX_WORKSPACE_BYTES, &wsMax, sizeof wsMax), "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)");
	FT_BT_TRY(ft_lt.pref_set(pref, FT_LT_PREF_MIN_ALIGNMENT_A_BYTES, &alignW, sizeof alignW), "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_A_BYTES)");
	FT_BT_TRY(ft_lt.pref_set(pref, FT_LT_PREF_MIN_ALIGNMENT_B_BYTES, &alignX, sizeof alignX), "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_B_BYTES)");
	FT_BT_TRY(ft_lt.pref_set(pref, FT_LT_PREF_MIN_ALIGNMENT_C_BYTES, &alignOut, sizeof alignOut), "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_C_BYTES)");
	FT_BT_TRY(ft_lt.pref_set(pref, FT_LT_PREF_MIN_ALIGNMENT_D_BYTES, &alignOut, sizeof alignOut), "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_D_BYTES)");
	FT_BT_TRY(ft_lt.heuristic(h, p->desc, p->la, p->lb, p->ld, p->ld, pref, want, res, nres), "cublasLtMatmulAlgoGetHeuristic");
#undef FT_BT_TRY
	ft_lt.pref_destroy(pref);
	*out = p;
	return 0;
fail:
	if (pref) ft_lt.pref_destroy(pref);
	ft_bt_plan_free(p);
	return st;
}

static void ft_bt_plan_set(ft_bt_plan* p, const ft_lt_algo* algo, size_t ws) {
	p->algo = *algo;
	p->ws = ws;
}

// ft_bt_run enqueues out = x·wᵀ (+ out, for beta 1) with algo on s.
static int ft_bt_run(CUcontext ctx, void* h, ft_bt_plan* p, const ft_lt_algo* algo, CUdeviceptr out,
		CUdeviceptr x, CUdeviceptr w, CUdeviceptr ws, size_t wsBytes, CUstream s) {
	if (ft_lt_ctx(ctx) != CUDA_SUCCESS) return -1;
	const float alpha = 1.0f;
	return ft_lt.matmul(h, p->desc, &alpha, (const void*)w, p->la, (const void*)x, p->lb, &p->beta,
		(const void*)out, p->ld, (void*)out, p->ld, algo ? algo : &p->algo, (void*)ws, wsBytes, s);
}

// ft_bt_gemmex is the same product by cublasGemmEx (CUBLAS_GEMM_DEFAULT),
// as GemmBF16 and GemmBF16Acc run it.
static int ft_bt_gemmex(CUcontext ctx, cublasHandle_t h, CUstream s, CUdeviceptr c, int cBF16,
		CUdeviceptr a, CUdeviceptr w, int M, int N, int K, int acc) {
	if (ft_lt_ctx(ctx) != CUDA_SUCCESS) return -1;
	cublasStatus_t st = cublasSetStream(h, (cudaStream_t)s);
	if (st != CUBLAS_STATUS_SUCCESS) return (int)st;
	const float alpha = 1.0f, beta = acc ? 1.0f : 0.0f;
	st = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K,
		&alpha, (const void*)w, CUDA_R_16BF, K,
		(const void*)a, CUDA_R_16BF, K,
		&beta, (void*)c, cBF16 ? CUDA_R_16BF : CUDA_R_32F, N,
		CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
	return (int)st;
}

// ft_bt_algo_attr reads one 4-byte configuration attribute of algo; -1 when
// it cannot.
static long ft_bt_algo_attr(const ft_lt_algo* algo, int attr) {
	if (!ft_lt.algo_get) return -1;
	uint32_t v = 0;
	size_t n = 0;
	if (ft_lt.algo_get(algo, attr, &v, sizeof v, &n) != 0 || n != sizeof v) return -1;
	return (long)v;
}
*/
import "C"

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
	"unsafe"
)

// gemmTuneCandidates is how many algorithms the heuristic is asked for per
// shape (besides cublasGemmEx).
const gemmTuneCandidates = 8

// gemmKey is what a tuned choice depends on: the sizes, the output type,
// beta (acc: 1, accumulating into an fp32 output) and the operands'
// alignments (an algorithm may need 16-byte aligned operands; capped at 16,
// the most any asks for, so that buffers at different offsets share keys).
// Choices are measured per bucket of m (gemmBucket: the key with m its
// bucket) and run per exact key.
type gemmKey struct {
	m, n, k                int
	cBF16, acc             bool
	alignX, alignW, alignC uint32
}

func (k gemmKey) String() string {
	out := "f32"
	if k.cBF16 {
		out = "bf16"
	}
	acc := ""
	if k.acc {
		acc = " += (beta 1)"
	}
	return fmt.Sprintf("[m=%d,n=%d,k=%d] %s out%s", k.m, k.n, k.k, out, acc)
}

// gemmChoice is the algorithm measured fastest for a bucket of shapes.
type gemmChoice struct {
	lt   bool         // a cuBLASLt algorithm (else cublasGemmEx)
	algo C.ft_lt_algo // the algorithm, when lt
	ws   uint64       // its workspace
	name string       // "cublasGemmEx" or "cublasLt <configuration>"
	m    int          // the m it was measured at
	ms   float64      // its time per call there
	why  string       // the measurements (traces)
}

// gemmRun is how one exact shape runs: a cuBLASLt plan of the bucket's
// algorithm, or cublasGemmEx (plan nil).
type gemmRun struct {
	plan  *C.ft_bt_plan
	name  string
	label string // the profiler row: gemmLabel(name, key)
}

// gemmTuner is a BLAS's tuned BF16 GEMM choices. Goroutine-safe: mu guards
// the maps and the count; tuneMu serialises measurements.
type gemmTuner struct {
	once    sync.Once
	err     error          // why cuBLASLt cannot be used (every shape runs cublasGemmEx)
	h       unsafe.Pointer // the cuBLASLt handle
	tuneMu  sync.Mutex
	mu      sync.Mutex
	choices map[gemmKey]*gemmChoice // by bucket key
	runs    map[gemmKey]*gemmRun    // by exact key
	tunings int                     // buckets measured so far
	// dead are plans dropped after a refusal: another goroutine may still
	// be running one, so they are freed only at close.
	dead []*C.ft_bt_plan
}

var bindBTOnce = sync.OnceValue(func() error {
	lib, err := loadLtOnce()
	if err != nil {
		return err
	}
	cp := C.CString(lib.path)
	defer C.free(unsafe.Pointer(cp))
	if e := C.ft_bt_bind(cp); e != nil {
		return fmt.Errorf("cuBLASLt %s: %s", lib.path, C.GoString(e))
	}
	return nil
})

func (t *gemmTuner) init(d *Device) error {
	t.once.Do(func() {
		if err := bindBTOnce(); err != nil {
			t.err = err
			return
		}
		var h unsafe.Pointer
		if st := C.ft_lt_create(d.ctx, &h); st != 0 {
			t.err = fmt.Errorf("cublasLtCreate: %s (status %d)", C.GoString(C.ft_lt_status(st)), int(st))
			return
		}
		t.h = h
	})
	return t.err
}

func (t *gemmTuner) close(d *Device) error {
	t.tuneMu.Lock()
	defer t.tuneMu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, r := range t.runs {
		if r.plan != nil {
			C.ft_bt_plan_free(r.plan)
		}
		delete(t.runs, k)
	}
	for _, p := range t.dead {
		C.ft_bt_plan_free(p)
	}
	t.dead = nil
	clear(t.choices)
	if t.h == nil {
		return nil
	}
	st := C.ft_lt_destroy(d.ctx, t.h)
	t.h = nil
	if st != 0 {
		return &Error{Op: "cublasLtDestroy", Lib: "cuBLAS", Code: int(st), Msg: C.GoString(C.ft_lt_status(st))}
	}
	return nil
}

func (t *gemmTuner) run(key gemmKey) *gemmRun {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.runs[key]
}

func (t *gemmTuner) choice(key gemmKey) *gemmChoice {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.choices[key]
}

// GemmTuning is one measured bucket of shapes as GemmBF16Tunings reports
// it.
type GemmTuning struct {
	M     int // the m the candidates were measured at
	MaxM  int // the bucket's largest m: m's that share the choice are in (the bucket below, MaxM]
	N, K  int
	CBF16 bool // bf16 output (else fp32)
	Acc   bool // beta 1: accumulating into the fp32 output
	// Name is what the kernel profiler calls the kept algorithm:
	// "cublasGemmEx" or "cublasLt " and its configuration.
	Name string
	Ms   float64 // its measured time per call (0: not measured)
}

// GemmBF16Tunings returns the buckets GemmBF16Tuned has chosen an algorithm
// for, in no particular order, and how many it has measured (each bucket
// once; tests check that).
func (b *BLAS) GemmBF16Tunings() ([]GemmTuning, int) {
	t := &b.tune
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]GemmTuning, 0, len(t.choices))
	for k, c := range t.choices {
		out = append(out, GemmTuning{M: c.m, MaxM: k.m, N: k.n, K: k.k, CBF16: k.cBF16, Acc: k.acc, Name: c.name, Ms: c.ms})
	}
	return out, t.tunings
}

func gemmAlign(p uintptr) uint32 { return min(align(p), 16) }

// GemmBF16Tuned enqueues on s what GemmBF16 (acc false: c[m,n] =
// a[m,k]·w[n,k]ᵀ into bf16 or fp32 c) or GemmBF16Acc (acc true: c += a·wᵀ,
// c fp32) do — bf16 a and w, fp32 accumulation — by the fastest of
// cublasGemmEx and up to 8 cuBLASLt algorithms for the shape.
//
// The first eager call of a shape measures them on its own operands (a few
// runs of each between events; the stream is synchronised) and keeps the
// fastest; c then holds the product of the kept algorithm, as after any
// call. A beta-1 shape is measured on a scratch output of c's size (when it
// cannot be allocated, the shape keeps cublasGemmEx). The choice serves
// every m of the shape's bucket (gemmBucket: each m up to 64, then buckets
// of at most 1.5× from 65 on), so that varying prompt lengths do not each
// pay a measurement; an m whose bucket's algorithm cuBLASLt refuses runs
// cublasGemmEx. While s is being captured, a shape of an unmeasured bucket
// runs cublasGemmEx and stays unmeasured (its first eager call measures).
// cuBLASLt uses the handle's 32 MiB workspace in stream order.
//
// FT_TRACE=1 prints each bucket's measurements and choice to stderr; the
// kernel profiler names the call "cublasLt <algorithm>[m=…,n=…,k=…]" or
// "cublasGemmEx[…]" by what ran ("+=" before the bracket for beta 1).
func (b *BLAS) GemmBF16Tuned(s *Stream, c uintptr, cBF16 bool, a, w uintptr, m, n, k int, acc bool) error {
	if m <= 0 || n <= 0 || k <= 0 {
		return fmt.Errorf("cuBLAS GEMM %dx%dx%d: sizes must be positive", m, n, k)
	}
	if acc && cBF16 {
		return fmt.Errorf("cuBLAS GEMM %dx%dx%d: accumulating (beta 1) takes an fp32 output", m, n, k)
	}
	key := gemmKey{m: m, n: n, k: k, cBF16: cBF16, acc: acc, alignX: gemmAlign(a), alignW: gemmAlign(w), alignC: gemmAlign(c)}
	if r := b.tune.run(key); r != nil {
		return b.runGemm(s, key, r, c, a, w)
	}
	bkey := key
	bkey.m = gemmBucket(m)
	ch := b.tune.choice(bkey)
	if ch == nil {
		capturing, err := b.capturing(s)
		if err != nil {
			return err
		}
		if capturing {
			return b.runGemm(s, key, nil, c, a, w)
		}
		r, err := b.tuneShape(s, bkey, key, c, a, w)
		if err != nil {
			return err
		}
		return b.runGemm(s, key, r, c, a, w)
	}
	return b.runGemm(s, key, b.planFrom(key, ch), c, a, w)
}

// capturing reports whether s is being captured into a graph.
func (b *BLAS) capturing(s *Stream) (bool, error) {
	r := C.ft_bt_capturing(b.dev.ctx, s.s)
	if r < 0 {
		return false, fmt.Errorf("%s: %w", b.dev.Name(), check("cuStreamIsCapturing", C.CUresult(-r)))
	}
	return r == 1, nil
}

// gemmBytes is what one product moves at least: a, w, c (twice with beta 1).
func gemmBytes(key gemmKey) int64 {
	cBytes := int64(4)
	if key.cBF16 {
		cBytes = 2
	}
	if key.acc {
		cBytes = 8
	}
	return 2*int64(key.m)*int64(key.k) + 2*int64(key.n)*int64(key.k) + cBytes*int64(key.m)*int64(key.n)
}

// gemmLabel is the kernel profiler's name of key's product run by name:
// "cublasGemmEx[m=…,n=…,k=…]", "cublasLt a66.t23.s35+=[…]" (beta 1).
func gemmLabel(name string, key gemmKey) string {
	acc := ""
	if key.acc {
		acc = "+="
	}
	return fmt.Sprintf("%s%s[m=%d,n=%d,k=%d]", name, acc, key.m, key.n, key.k)
}

// planFrom makes (once) key's run from its bucket's choice ch: the
// descriptors for key's exact sizes with ch's algorithm, measuring nothing
// (legal while capturing); cublasGemmEx when ch is, or when the
// descriptors cannot be made.
func (b *BLAS) planFrom(key gemmKey, ch *gemmChoice) *gemmRun {
	t := &b.tune
	t.mu.Lock()
	defer t.mu.Unlock()
	if r := t.runs[key]; r != nil {
		return r
	}
	r := &gemmRun{name: "cublasGemmEx"}
	why := ""
	if ch.lt && t.h != nil {
		dt := C.int(C.FT_LT_CUDA_R_32F)
		if key.cBF16 {
			dt = C.FT_LT_CUDA_R_16BF
		}
		accI := C.int(0)
		if key.acc {
			accI = 1
		}
		var plan *C.ft_bt_plan
		var nres C.int
		var what *C.char
		st := C.ft_bt_make_plan(b.dev.ctx, t.h, C.int(key.m), C.int(key.n), C.int(key.k), dt, accI,
			C.uint32_t(key.alignX), C.uint32_t(key.alignW), C.uint32_t(key.alignC), C.uint64_t(blasWorkspace),
			0, &plan, nil, &nres, &what)
		if st == 0 {
			C.ft_bt_plan_set(plan, &ch.algo, C.size_t(ch.ws))
			r = &gemmRun{plan: plan, name: ch.name}
		} else {
			why = fmt.Sprintf(" (cuBLASLt: %s: %s, status %d)", C.GoString(what), C.GoString(C.ft_lt_status(st)), int(st))
		}
	}
	r.label = gemmLabel(r.name, key)
	t.runs[key] = r
	if os.Getenv("FT_TRACE") == "1" {
		fmt.Fprintf(os.Stderr, "trace: %s: BF16 GEMM %s: %s%s, the choice measured at m=%d for m ≤ %d\n",
			b.dev.Name(), key, r.name, why, ch.m, gemmBucket(key.m))
	}
	return r
}

// runGemm enqueues key's product by r (nil: cublasGemmEx), timed under its
// name when a kernel profile runs. A cuBLASLt plan the library refuses at
// the call (nothing launched) is replaced by cublasGemmEx for good.
func (b *BLAS) runGemm(s *Stream, key gemmKey, r *gemmRun, c, a, w uintptr) error {
	if r == nil {
		r = &gemmRun{name: "cublasGemmEx", label: gemmLabel("cublasGemmEx", key)} // a capture's unmeasured shape: rare
	}
	return b.dev.timed(s, r.label, gemmBytes(key), func() error {
		name := r.name
		var st C.int
		if r.plan == nil {
			st = b.gemmEx(s, key, c, a, w)
		} else {
			st = C.ft_bt_run(b.dev.ctx, b.tune.h, r.plan, nil, C.CUdeviceptr(c), C.CUdeviceptr(a), C.CUdeviceptr(w),
				C.CUdeviceptr(b.ws.Ptr()), C.size_t(blasWorkspace), s.s)
			if st == C.FT_LT_STATUS_NOT_SUPPORTED || st == C.FT_LT_STATUS_INVALID_VALUE {
				b.dropPlan(key, r)
				name = "cublasGemmEx"
				st = b.gemmEx(s, key, c, a, w)
			}
		}
		if st != 0 {
			return fmt.Errorf("%s: %s bf16 %s: %s (cuBLAS status %d)", b.dev.Name(), name, key, C.GoString(C.ft_lt_status(st)), int(st))
		}
		return nil
	})
}

// dropPlan makes key run cublasGemmEx from now on (its plan r was refused).
func (b *BLAS) dropPlan(key gemmKey, r *gemmRun) {
	t := &b.tune
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.runs[key] == r {
		t.runs[key] = &gemmRun{name: "cublasGemmEx", label: gemmLabel("cublasGemmEx", key)}
		t.dead = append(t.dead, r.plan) // freed at close: a call may still hold r
	}
	if os.Getenv("FT_TRACE") == "1" {
		fmt.Fprintf(os.Stderr, "trace: %s: BF16 GEMM %s: cuBLASLt refused %s; cublasGemmEx from now on\n", b.dev.Name(), key, r.name)
	}
}

func (b *BLAS) gemmEx(s *Stream, key gemmKey, c, a, w uintptr) C.int {
	bf, acc := C.int(0), C.int(0)
	if key.cBF16 {
		bf = 1
	}
	if key.acc {
		acc = 1
	}
	return C.ft_bt_gemmex(b.dev.ctx, b.h, s.s, C.CUdeviceptr(c), bf, C.CUdeviceptr(a), C.CUdeviceptr(w),
		C.int(key.m), C.int(key.n), C.int(key.k), acc)
}

// ltAlgoName describes a cuBLASLt algorithm by its configuration: a<id>,
// t<tile>, s<stages>, and k<splits>, r<reduction>, w (CTA swizzling),
// c<custom option> where not the default.
func ltAlgoName(algo *C.ft_lt_algo) string {
	get := func(attr C.int) int64 { return int64(C.ft_bt_algo_attr(algo, attr)) }
	id := get(C.FT_BT_ALGO_ID)
	if id < 0 {
		return "a?"
	}
	s := fmt.Sprintf("a%d.t%d.s%d", id, get(C.FT_BT_ALGO_TILE), get(C.FT_BT_ALGO_STAGES))
	if v := get(C.FT_BT_ALGO_SPLITK); v > 1 {
		s += fmt.Sprintf(".k%d", v)
		if r := get(C.FT_BT_ALGO_REDUCTION); r > 0 {
			s += fmt.Sprintf(".r%d", r)
		}
	}
	if get(C.FT_BT_ALGO_SWIZZLE) == 1 {
		s += ".w"
	}
	if v := get(C.FT_BT_ALGO_CUSTOM); v > 0 {
		s += fmt.Sprintf(".c%d", v)
	}
	return s
}

// reducesInF32 reports whether algo sums its split-K partial products in
// FP32: no split, or the reduction in the compute type. Split-K in place
// or in the output type adds BF16 partial sums, a rounding per split on
// top of the output's one; measured on the H200 (TestTunedGEMM, M=300,
// N=1000, K=1001: 0.0024 off the CPU's sum where one rounding allows
// 0.0022), so those are not candidates for a BF16 output, nor is an
// algorithm whose configuration cannot be read.
func reducesInF32(algo *C.ft_lt_algo) bool {
	switch k := int64(C.ft_bt_algo_attr(algo, C.FT_BT_ALGO_SPLITK)); {
	case k < 0:
		return false // unreadable: not known to be safe
	case k <= 1:
		return true
	}
	return int64(C.ft_bt_algo_attr(algo, C.FT_BT_ALGO_REDUCTION)) == 2 // CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE
}

// gemmCandidate is one algorithm being measured.
type gemmCandidate struct {
	name  string
	res   *C.ft_lt_heur // nil: cublasGemmEx
	err   error
	spans [][2]*Event // around each sample's runs
	ms    float64     // median per run
}

// tuneShape measures key's candidates on s, keeps the fastest as bkey's
// choice and key's run, and returns the run.
func (b *BLAS) tuneShape(s *Stream, bkey, key gemmKey, c, a, w uintptr) (*gemmRun, error) {
	t := &b.tune
	t.tuneMu.Lock()
	defer t.tuneMu.Unlock()
	if ch := t.choice(bkey); ch != nil {
		return b.planFrom(key, ch), nil // another goroutine measured it meanwhile
	}
	ch, plan, err := b.measure(s, key, c, a, w)
	if err != nil {
		return nil, err
	}
	r := &gemmRun{plan: plan, name: ch.name, label: gemmLabel(ch.name, key)}
	t.mu.Lock()
	if t.choices == nil {
		t.choices, t.runs = map[gemmKey]*gemmChoice{}, map[gemmKey]*gemmRun{}
	}
	t.choices[bkey] = ch
	t.runs[key] = r
	t.tunings++
	t.mu.Unlock()
	if os.Getenv("FT_TRACE") == "1" {
		fmt.Fprintf(os.Stderr, "trace: %s: BF16 GEMM %s (m ≤ %d): %s\n", b.dev.Name(), key, bkey.m, ch.why)
	}
	return r, nil
}

// measure times key's candidates (tuneMu held) and returns the choice and,
// for a cuBLASLt one, key's plan with its algorithm.
func (b *BLAS) measure(s *Stream, key gemmKey, c, a, w uintptr) (*gemmChoice, *C.ft_bt_plan, error) {
	gemmEx := &gemmChoice{name: "cublasGemmEx", m: key.m}
	if err := b.tune.init(b.dev); err != nil {
		gemmEx.why = "cublasGemmEx (cuBLASLt unavailable: " + err.Error() + ")"
		return gemmEx, nil, nil
	}
	if b.tune.h == nil {
		gemmEx.why = "cublasGemmEx (the cuBLASLt handle is closed)"
		return gemmEx, nil, nil
	}
	dt := C.int(C.FT_LT_CUDA_R_32F)
	if key.cBF16 {
		dt = C.FT_LT_CUDA_R_16BF
	}
	accI := C.int(0)
	if key.acc {
		accI = 1
	}
	var plan *C.ft_bt_plan
	res := make([]C.ft_lt_heur, C.FT_BT_MAX_CANDIDATES)
	var nres C.int
	var what *C.char
	st := C.ft_bt_make_plan(b.dev.ctx, b.tune.h, C.int(key.m), C.int(key.n), C.int(key.k), dt, accI,
		C.uint32_t(key.alignX), C.uint32_t(key.alignW), C.uint32_t(key.alignC), C.uint64_t(blasWorkspace),
		C.int(gemmTuneCandidates), &plan, &res[0], &nres, &what)
	if st != 0 {
		gemmEx.why = fmt.Sprintf("cublasGemmEx (cuBLASLt: %s: %s, status %d)", C.GoString(what), C.GoString(C.ft_lt_status(st)), int(st))
		return gemmEx, nil, nil
	}
	keep := false
	defer func() {
		if !keep {
			C.ft_bt_plan_free(plan)
		}
	}()
	cands := []*gemmCandidate{{name: "cublasGemmEx"}}
	for i := range int(nres) {
		r := &res[i]
		if r.state != 0 || uint64(r.workspaceSize) > blasWorkspace || (key.cBF16 && !reducesInF32(&r.algo)) {
			continue
		}
		cands = append(cands, &gemmCandidate{name: "cublasLt " + ltAlgoName(&r.algo), res: r})
	}
	if len(cands) == 1 {
		gemmEx.why = "cublasGemmEx (the cuBLASLt heuristic has no algorithm for this shape and alignment)"
		return gemmEx, nil, nil
	}

	// The runs write out; with beta 1 into a zeroed scratch of c's size,
	// so c is added to once, by the kept algorithm after the measurement.
	out := c
	if key.acc {
		scratch, err := b.dev.Alloc(4*int64(key.m)*int64(key.n), "BF16 GEMM tuning output")
		if err != nil {
			gemmEx.why = "cublasGemmEx (no scratch output to measure a beta-1 shape: " + err.Error() + ")"
			return gemmEx, nil, nil
		}
		defer scratch.Free() // after the synchronisation below
		if err := s.MemsetD32(scratch.Ptr(), 0, int64(key.m)*int64(key.n)); err != nil {
			return nil, nil, err
		}
		out = scratch.Ptr()
	}
	run := func(cd *gemmCandidate) error {
		var st C.int
		if cd.res == nil {
			st = b.gemmEx(s, key, out, a, w)
		} else {
			st = C.ft_bt_run(b.dev.ctx, b.tune.h, plan, &cd.res.algo, C.CUdeviceptr(out), C.CUdeviceptr(a), C.CUdeviceptr(w),
				C.CUdeviceptr(b.ws.Ptr()), C.size_t(blasWorkspace), s.s)
		}
		if st != 0 {
			return fmt.Errorf("%s: tuning %s bf16 %s: %s (cuBLAS status %d)", b.dev.Name(), cd.name, key, C.GoString(C.ft_lt_status(st)), int(st))
		}
		return nil
	}

	// cublasGemmEx twice to warm up and once timed: how many runs make a
	// sample of about gemmSampleTarget.
	ref := cands[0]
	for range 2 {
		if err := run(ref); err != nil {
			return nil, nil, err
		}
	}
	e0, err := s.RecordEvent()
	if err != nil {
		return nil, nil, err
	}
	if err := run(ref); err != nil {
		return nil, nil, err
	}
	e1, err := s.RecordEvent()
	if err != nil {
		return nil, nil, err
	}
	if err := e1.Synchronize(); err != nil {
		return nil, nil, err
	}
	once, err := e1.ElapsedSince(e0)
	if err != nil {
		return nil, nil, err
	}
	runs, samples := gemmSamplePlan(once)
	if b.TuneSustained {
		samples = gemmSustainSamples
	}

	// runN runs cd n times; false when a cuBLASLt candidate failed to
	// launch (cuBLASLt refuses before launching anything: it is dropped);
	// cublasGemmEx failing is an error.
	runN := func(cd *gemmCandidate, n int) (bool, error) {
		for range n {
			if err := run(cd); err != nil {
				if cd.res == nil {
					return false, err
				}
				cd.err = err
				return false, nil
			}
		}
		return true, nil
	}
	// sample enqueues one timed sample of cd: runs runs between two events.
	sample := func(cd *gemmCandidate) error {
		e0, err := s.RecordEvent()
		if err != nil {
			return err
		}
		if ok, err := runN(cd, runs); err != nil || !ok {
			return err
		}
		e1, err := s.RecordEvent()
		if err != nil {
			return err
		}
		cd.spans = append(cd.spans, [2]*Event{e0, e1})
		return nil
	}
	// Every candidate gets a warm-up run, then its samples, all enqueued
	// before one synchronisation so that the GPU does not wait on the host
	// between them: one candidate after another, or with TuneSustained,
	// after a lead-in of the reference's runs that brings the GPU to its
	// sustained clocks, the candidates' samples in turns, so that each is
	// timed in the same state.
	if !b.TuneSustained {
		for _, cd := range cands {
			if _, err := runN(cd, 1); err != nil {
				return nil, nil, err
			}
			for range samples {
				if cd.err != nil {
					break
				}
				if err := sample(cd); err != nil {
					return nil, nil, err
				}
			}
		}
	} else {
		if _, err := runN(ref, gemmSustainLeadRuns(once)); err != nil {
			return nil, nil, err
		}
		for _, cd := range cands {
			if _, err := runN(cd, 1); err != nil {
				return nil, nil, err
			}
		}
		for range samples {
			for _, cd := range cands {
				if cd.err != nil {
					continue
				}
				if err := sample(cd); err != nil {
					return nil, nil, err
				}
			}
		}
	}
	if err := s.Synchronize(); err != nil {
		return nil, nil, err
	}
	for _, cd := range cands {
		if cd.err != nil {
			continue
		}
		per := make([]time.Duration, 0, samples)
		for _, sp := range cd.spans {
			d, err := sp[1].ElapsedSince(sp[0])
			if err != nil {
				return nil, nil, err
			}
			per = append(per, d/time.Duration(runs))
		}
		cd.ms = float64(medianDuration(per).Nanoseconds()) / 1e6
	}

	win := cands[pickGemmCandidate(candTimes(cands))]
	var parts []string
	for _, cd := range cands {
		if cd.err != nil {
			parts = append(parts, cd.name+" failed")
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.4f", cd.name, cd.ms))
	}
	why := fmt.Sprintf("%s %.4f ms (cublasGemmEx %.4f ms; median of %d samples of %d runs; ms: %s)",
		win.name, win.ms, cands[0].ms, samples, runs, strings.Join(parts, ", "))
	if win.res == nil {
		return &gemmChoice{name: "cublasGemmEx", m: key.m, ms: win.ms, why: why}, nil, nil
	}
	C.ft_bt_plan_set(plan, &win.res.algo, win.res.workspaceSize)
	keep = true
	return &gemmChoice{lt: true, algo: win.res.algo, ws: uint64(win.res.workspaceSize), name: win.name, m: key.m, ms: win.ms, why: why}, plan, nil
}

// candTimes lists the candidates' times, negative for a failed one.
func candTimes(cands []*gemmCandidate) []float64 {
	out := make([]float64, len(cands))
	for i, cd := range cands {
		out[i] = cd.ms
		if cd.err != nil {
			out[i] = -1
		}
	}
	return out
}
