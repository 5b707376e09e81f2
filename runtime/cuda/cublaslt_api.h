// The cuBLASLt entry points that blaslt.go (FP8 GEMMs) and gemmtune.go (tuned
// BF16 GEMMs) call, loaded at run time with dlopen: the few types, enums and
// prototypes used, with their numeric values from cublasLt.h /
// library_types.h / cublas_api.h (stable ABI since CUDA 11.8), the table of
// function pointers and its binding. Each cgo file that includes it binds
// its own copy of the table from the same loaded library.
#ifndef FT_CUBLASLT_API_H
#define FT_CUBLASLT_API_H

#include <cuda.h>
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>

enum {
	FT_LT_CUDA_R_32F = 0, FT_LT_CUDA_R_16BF = 14, FT_LT_CUDA_R_8F_E4M3 = 28, // cudaDataType_t
	FT_LT_COMPUTE_32F = 68,                                                  // cublasComputeType_t
	FT_LT_OP_N = 0, FT_LT_OP_T = 1,                                          // cublasOperation_t
	FT_LT_STATUS_INVALID_VALUE = 7, FT_LT_STATUS_NOT_SUPPORTED = 15,        // cublasStatus_t
	FT_LT_DESC_TRANSA = 3, FT_LT_DESC_TRANSB = 4,                            // cublasLtMatmulDescAttributes_t
	// cublasLtMatmulPreferenceAttributes_t
	FT_LT_PREF_MAX_WORKSPACE_BYTES = 1,
	FT_LT_PREF_MIN_ALIGNMENT_A_BYTES = 5, FT_LT_PREF_MIN_ALIGNMENT_B_BYTES = 6,
	FT_LT_PREF_MIN_ALIGNMENT_C_BYTES = 7, FT_LT_PREF_MIN_ALIGNMENT_D_BYTES = 8,
};

// cublasLtMatmulAlgo_t and cublasLtMatmulHeuristicResult_t.
typedef struct { uint64_t data[8]; } ft_lt_algo;
typedef struct {
	ft_lt_algo algo;
	size_t workspaceSize;
	int state;
	float wavesCount;
	int reserved[4];
} ft_lt_heur;

// The entry points (handles and descriptors are opaque pointers; enums are
// ints).
typedef struct {
	int (*create)(void**);
	int (*destroy)(void*);
	size_t (*version)(void);
	const char* (*status_string)(int); // may be NULL
	int (*desc_create)(void**, int, int);
	int (*desc_set)(void*, int, const void*, size_t);
	int (*desc_destroy)(void*);
	int (*layout_create)(void**, int, uint64_t, uint64_t, int64_t);
	int (*layout_destroy)(void*);
	int (*pref_create)(void**);
	int (*pref_set)(void*, int, const void*, size_t);
	int (*pref_destroy)(void*);
	int (*heuristic)(void*, void*, void*, void*, void*, void*, void*, int, ft_lt_heur*, int*);
	int (*matmul)(void*, void*, const void*, const void*, void*, const void*, void*, const void*,
		const void*, void*, void*, void*, const ft_lt_algo*, void*, size_t, CUstream);
	int (*algo_get)(const ft_lt_algo*, int, void*, size_t, size_t*); // may be NULL
} ft_lt_api_t;

static ft_lt_api_t ft_lt;

// ft_lt_bind fills ft_lt from the library h; it returns the name of the
// first missing required symbol, or NULL.
static const char* ft_lt_bind(void* h) {
#define FT_LT_SYM(field, name) do { *(void**)(&ft_lt.field) = dlsym(h, name); if (!ft_lt.field) return name; } while (0)
	FT_LT_SYM(create, "cublasLtCreate");
	FT_LT_SYM(destroy, "cublasLtDestroy");
	FT_LT_SYM(version, "cublasLtGetVersion");
	FT_LT_SYM(desc_create, "cublasLtMatmulDescCreate");
	FT_LT_SYM(desc_set, "cublasLtMatmulDescSetAttribute");
	FT_LT_SYM(desc_destroy, "cublasLtMatmulDescDestroy");
	FT_LT_SYM(layout_create, "cublasLtMatrixLayoutCreate");
	FT_LT_SYM(layout_destroy, "cublasLtMatrixLayoutDestroy");
	FT_LT_SYM(pref_create, "cublasLtMatmulPreferenceCreate");
	FT_LT_SYM(pref_set, "cublasLtMatmulPreferenceSetAttribute");
	FT_LT_SYM(pref_destroy, "cublasLtMatmulPreferenceDestroy");
	FT_LT_SYM(heuristic, "cublasLtMatmulAlgoGetHeuristic");
	FT_LT_SYM(matmul, "cublasLtMatmul");
#undef FT_LT_SYM
	*(void**)(&ft_lt.status_string) = dlsym(h, "cublasLtGetStatusString");
	*(void**)(&ft_lt.algo_get) = dlsym(h, "cublasLtMatmulAlgoConfigGetAttribute");
	return NULL;
}

static const char* ft_lt_status(int st) {
	if (st < 0) return "could not make the CUDA context current";
	if (ft_lt.status_string) return ft_lt.status_string(st);
	return "cuBLAS status";
}

// ft_lt_ctx makes ctx current on the calling thread.
static CUresult ft_lt_ctx(CUcontext ctx) {
	CUcontext cur = NULL;
	CUresult r = cuCtxGetCurrent(&cur);
	if (r != CUDA_SUCCESS) return r;
	if (cur == ctx) return CUDA_SUCCESS;
	return cuCtxSetCurrent(ctx);
}

static int ft_lt_create(CUcontext ctx, void** h) {
	if (ft_lt_ctx(ctx) != CUDA_SUCCESS) return -1;
	return ft_lt.create(h);
}

static int ft_lt_destroy(CUcontext ctx, void* h) {
	if (ft_lt_ctx(ctx) != CUDA_SUCCESS) return -1;
	return ft_lt.destroy(h);
}

#endif
