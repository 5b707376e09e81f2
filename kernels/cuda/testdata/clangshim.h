// What NVRTC provides without headers, for TestSourcesCompileClang: clang
// parses and type-checks the kernel sources as CUDA device code (-x cuda
// --cuda-device-only -nocudainc -fsyntax-only) with this file included
// first. Declarations only where a body is not needed to check the calls;
// the rest comes from clang's own CUDA headers. It checks the C++ (names,
// types, templates), not the inline PTX, which NVRTC assembles on the GPU
// machine.
#define CUDA_VERSION 12000
#define __CUDA__ 1
#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#define __align__(n) __attribute__((aligned(n)))
#define __grid_constant__ // a kernel parameter attribute clang 14 does not know
#define __cluster_dims__(...) // a kernel attribute (sm_90) clang 14 does not know
typedef unsigned long size_t;

// The vector types and their make_ functions.
#define FT_VT(T, N, A)                                                                                   \
	struct __align__(A) N##1 { T x; };                                                               \
	struct __align__(2 * A) N##2 { T x, y; };                                                        \
	struct N##3 { T x, y, z; };                                                                      \
	struct __align__(4 * A) N##4 { T x, y, z, w; };                                                  \
	__device__ inline N##1 make_##N##1(T a) { return {a}; }                                          \
	__device__ inline N##2 make_##N##2(T a, T b) { return {a, b}; }                                  \
	__device__ inline N##3 make_##N##3(T a, T b, T c) { return {a, b, c}; }                          \
	__device__ inline N##4 make_##N##4(T a, T b, T c, T d) { return {a, b, c, d}; }
FT_VT(unsigned, uint, 4)
FT_VT(int, int, 4)
FT_VT(float, float, 4)
FT_VT(unsigned short, ushort, 2)
FT_VT(short, short, 2)
FT_VT(unsigned char, uchar, 1)
FT_VT(signed char, char, 1)
FT_VT(long long, longlong, 8)
FT_VT(unsigned long long, ulonglong, 8)
FT_VT(double, double, 8)
struct dim3 { unsigned x, y, z; };
typedef unsigned int cuuint32_t;
typedef unsigned long long cuuint64_t;

#include <limits.h>
#define HUGE_VAL __builtin_huge_val()
#define HUGE_VALF __builtin_huge_valf()
#include <__clang_cuda_builtin_vars.h>
#include <__clang_cuda_libdevice_declares.h>
#include <__clang_cuda_device_functions.h>
#include <__clang_cuda_math.h>
#include <__clang_cuda_intrinsics.h>

__device__ float atomicAdd(float*, float);
__device__ int atomicAdd(int*, int);
__device__ unsigned atomicAdd(unsigned*, unsigned);
__device__ unsigned long long atomicAdd(unsigned long long*, unsigned long long);
__device__ int atomicExch(int*, int);
__device__ unsigned atomicExch(unsigned*, unsigned);
__device__ float atomicExch(float*, float);
__device__ int atomicMax(int*, int);
__device__ unsigned atomicMax(unsigned*, unsigned);
__device__ int atomicCAS(int*, int, int);
__device__ unsigned atomicCAS(unsigned*, unsigned, unsigned);
template <class T> __device__ T __ldcg(const T*);
template <class T> __device__ T __ldcs(const T*);
template <class T> __device__ void __stcg(T*, T);
template <class T> __device__ void __stcs(T*, T);
__device__ bool isnan(float);
__device__ bool isinf(float);
__device__ bool isfinite(float);
__device__ void __nanosleep(unsigned);
__device__ size_t __cvta_generic_to_shared(const void*);
