//go:build cuda

package cudabackend

import (
	"os"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// L2 prefetch of weights (kernels.L2Prefetcher; kernels/cuda/l2prefetch.cu):
// l2_prefetch_weights asks L2 for a weight's bytes so that the projection
// that reads it next finds them there, issued by the decoder in front of the
// latency-bound kernels of a one-token step (models/decoder/l2prefetch.go).
// It is launched with programmatic dependent launch (pdl.go): its
// prefetches go out while the kernel before it finishes, and it waits for
// that kernel before it exits, so the kernels after it stay ordered.

// l2PlanFromEnv is Backend.L2Plan's default: FT_L2_PREFETCH ("", "0", "o"
// or "all"; off unless set). Measured slower on the H200 (2026-12-01,
// bench/h200-s5c.sh, Llama-3-8B shape, context 512): graph-replayed steps
// of 4.53 ms ("o") and 4.64 ms ("all") against 4.33 ms. The likely cause
// (not profiled): the kernel after the prefetch waits for it through the
// dependent-launch chain, so its bulk prefetches land on the critical
// path; a prefetch on a second stream (a graph branch) would overlap.
func l2PlanFromEnv() (kernels.L2PrefetchPlan, error) {
	return kernels.ParseL2PrefetchPlan(os.Getenv("FT_L2_PREFETCH"))
}

// l2PrefetchChunk is FT_L2PF_CHUNK of l2prefetch.cu: the bytes one thread's
// bulk prefetch asks for.
const l2PrefetchChunk = 16 << 10

// l2PrefetchGrid is the grid of l2_prefetch_weights over bytes: one bulk
// prefetch per thread of 64, spread over up to 64 blocks (more SMs' copy
// engines issuing at once) and more chunks a thread beyond that.
func l2PrefetchGrid(bytes int64) int {
	chunks := (bytes + l2PrefetchChunk - 1) / l2PrefetchChunk
	return int(max(1, min(64, (chunks+63)/64)))
}

// L2Prefetch is the plan the decoder follows (Backend.L2Plan).
func (b *Backend) L2Prefetch() kernels.L2PrefetchPlan { return b.L2Plan }

// PrefetchL2 enqueues l2_prefetch_weights over the first bytes bytes of t
// (kernels.L2Prefetcher); nothing for bytes == 0.
func (b *Backend) PrefetchL2(t *runtime.Tensor, bytes int64) error {
	if err := kernels.CheckPrefetchL2(b.dev, t, bytes); err != nil {
		return err
	}
	if bytes == 0 {
		return nil
	}
	return b.k.l2prefetch.Launch(b.s, cuda.Dim3{X: l2PrefetchGrid(bytes)}, cuda.Dim3{X: 64}, 0,
		cuda.Ptr(t.Ptr()), cuda.I64(bytes))
}

var _ kernels.L2Prefetcher = (*Backend)(nil)
