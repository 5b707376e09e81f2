//go:build cuda

package cudabackend

import "github.com/flextensor-go/flextensor/runtime/cuda"

// Programmatic dependent launch (runtime/cuda/pdl.go): on sm_90 the kernels
// below are launched so that their blocks start while the kernel before
// them finishes. Each of them calls ft_pdl_wait (kernels/cuda/common.cuh,
// whose comment is the contract) before it reads memory the kernel still
// running ahead of it may write, or writes memory that kernel may touch;
// only kernels that do are listed: one without the wait would race with
// the kernel before it. These are the kernels of a resident decode step (the
// one-token GEMVs, BF16 and FP8 in every tuning variant, norms, RoPE with
// the KV store, tensor-core decode attention, residual adds, embedding,
// argmax and sampling). The device
// decides whether the attribute is used (SetDependentLaunch; FT_PDL=0 turns
// it off); the kernel profiler's events between launches serialise them.
// The list is kept by hand; kernels/cuda/dependent_launch.txt, which a
// test keeps true to the sources, names every kernel that reaches
// ft_pdl_wait, and TestDependentLaunchMatchesSources (GPU) checks this list
// against it both ways: nothing declared that does not wait, nothing that
// waits left undeclared.

// dependentLaunchKernels are the kernels that call ft_pdl_wait first.
func (ks *kernelSet) dependentLaunchKernels() []*cuda.Function {
	fs := []*cuda.Function{
		ks.addF32, ks.addF32V4, ks.embedF32, ks.argmax, ks.argmaxFeed, ks.argmaxSplit, ks.addBias, ks.scale,
		ks.rms, ks.rmsV8, ks.rmsF32, ks.addRMS, ks.rmsPair, ks.qkNormRoPE,
		ks.rope, ks.ropeStore, ks.paged.ropeStore,
		ks.gemvPersist, ks.gemvPersistF32, ks.gemvAcc, ks.gemvAccNorm, ks.gemv3, ks.gateUp,
		ks.sample, ks.prefill.ropeStore, ks.prefill.ropeStorePaged,
	}
	for _, m := range []map[int]*cuda.Function{ks.gemv, ks.gemvF32, ks.decodeMMA.contig, ks.decodeMMA.paged} {
		for _, f := range m {
			fs = append(fs, f)
		}
	}
	for _, pk := range ks.decodeMMA.pipe {
		fs = append(fs, pk.contig, pk.paged)
	}
	for _, f := range ks.decodeMMA.cluster {
		if f != nil {
			fs = append(fs, f)
		}
	}
	fs = append(fs, ks.norm.functions()...)
	fs = append(fs, ks.qkvRoPE)
	fs = append(fs, ks.normRows.functions()...)
	fs = append(fs, ks.gemvPipe.functions()...)
	fs = append(fs, ks.earlyFunctions()...)
	return append(fs, ks.fp8.functions()...)
}

// allowDependentLaunch declares dependentLaunchKernels safe for
// programmatic dependent launch.
func (ks *kernelSet) allowDependentLaunch() {
	for _, f := range ks.dependentLaunchKernels() {
		f.SetDependentLaunch(true)
	}
}
