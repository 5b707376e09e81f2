// Package cudabackend runs the model's ops on an NVIDIA GPU: a
// kernels.Backend over runtime/cuda devices whose activations are BF16 with
// fp32 accumulation; the residual stream may be F32 (Embedding, Add and
// RMSNorm take F32 there, as the Llama model keeps it), and MatMul may write
// F32 (the logits, the projections added to the residual). MatMul is cuBLAS (bf16 in, fp32 accumulate) for several
// tokens and a bandwidth-bound GEMV kernel for one; the other ops are the
// kernels of package kernels/cuda, compiled with NVRTC when the backend is
// made. It also has the optional capabilities of package kernels: CUDA-graph
// capture of a forward step (kernels.StepCapturer), a fused RoPE + KV-cache
// store (kernels.RoPEStorer), Qwen3's per-head q/k norms with RoPE and the
// KV store in one kernel (kernels.NormRoPEStorer), argmax on the device (kernels.Argmaxer), and
// for batches over a paged KV cache: decode attention split across thread
// blocks (kernels.PagedDecodeAttender), tensor-core flash attention over
// packed variable-length prefills (kernels.VarlenPrefillAttender) and RoPE +
// KV store at per-token positions and pool rows (kernels.BatchRoPEStorer).
//
// The backend builds only with the cuda build tag; without it, New returns
// an error wrapping cuda.ErrNotBuilt, so that programs using it compile
// either way.
package cudabackend
