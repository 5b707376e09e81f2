/*
 * FlexTensor's compatibility shim for gorgonia.org/cu against CUDA 13 headers.
 *
 * It is found first on the include path (the Makefile's build-cuda and
 * test-cuda targets put -I runtime/cuda/compat in CGO_CFLAGS ahead of the
 * toolkit's include directory), includes the real cuda.h, and for
 * CUDA_VERSION >= 13000 points back the five names whose signatures CUDA 13
 * changed at the old symbols, which the driver still exports, with their old
 * prototypes:
 *
 *   cuCtxCreate            -> cuCtxCreate_v2(CUcontext*, unsigned, CUdevice)
 *   cuMemAdvise            -> cuMemAdvise(CUdeviceptr, size_t, CUmem_advise, CUdevice)
 *   cuMemPrefetchAsync     -> cuMemPrefetchAsync(CUdeviceptr, size_t, CUdevice, CUstream)
 *   cuGraphAddDependencies -> cuGraphAddDependencies(CUgraph, const CUgraphNode*, const CUgraphNode*, size_t)
 *   cuGraphGetEdges        -> cuGraphGetEdges(CUgraph, CUgraphNode*, CUgraphNode*, size_t*)
 *
 * With older headers it only includes cuda.h.
 */
#ifndef FLEXTENSOR_COMPAT_CUDA_H
#define FLEXTENSOR_COMPAT_CUDA_H

#include_next <cuda.h>

#if defined(CUDA_VERSION) && CUDA_VERSION >= 13000

#ifdef __cplusplus
extern "C" {
#endif

#undef cuCtxCreate
CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
#define cuCtxCreate cuCtxCreate_v2

#undef cuMemAdvise
CUresult CUDAAPI cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device);

#undef cuMemPrefetchAsync
CUresult CUDAAPI cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream);

#undef cuGraphAddDependencies
CUresult CUDAAPI cuGraphAddDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to, size_t numDependencies);

#undef cuGraphGetEdges
CUresult CUDAAPI cuGraphGetEdges(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, size_t *numEdges);

#ifdef __cplusplus
}
#endif

#endif /* CUDA_VERSION >= 13000 */
#endif /* FLEXTENSOR_COMPAT_CUDA_H */
