//go:build cuda

package cudabackend

import (
	"fmt"
	"math"
	"os"
	"strconv"

	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// One-sequence decode attention over a short contiguous cache with its
// splits merged inside a thread-block cluster (decode_tr.cu's
// FT_TR_CLUSTER_VARIANT, sm_90): the CS splits of a KV head are one
// cluster; each block combines its warps' partials in its shared memory
// and the cluster's blocks read each other's through distributed shared
// memory, where the pipelined kernel writes every split's partials to
// global memory, fences, counts the finished splits with an atomic and
// lets the last block read them back. Why: in s29c's block trace (FP8
// step at context 512, H200) ~6 µs of the attention's 8.7 µs a layer on
// the critical path lay between a warp's last key group and the merged
// output, in those dependent round trips.

// clusterSplits are the compiled cluster sizes (splits a KV head).
var clusterSplits = []int{2, 4, 8}

// clusterBases are the variants compiled with cluster twins: the default
// contigPipeShort (8 warps a block, a 128 KiB ring) and its 4-warp
// sibling (64 KiB; Backend.DecodeClusterWarps = 4, an A/B run: s29d's
// trace had the 8-warp twins' blocks start ~1.6 µs later after the RoPE
// kernel's wait than the plain kernel's, losing the window in which they
// copy the older rows early; a block that takes half an SM's shared
// memory may find room sooner).
var clusterBases = []string{contigPipeShort, "s2w4h1tp"}

// clusterKey names one cluster twin: its base variant and split count.
type clusterKey struct {
	base string
	cs   int
}

// clusterRows is the most cache rows a split of a cluster twin covers at
// full capacity: clusterFor takes the fewest splits that keep to it (8
// from 257 rows up, also past 8·64). Measured on the H200 (bench/h200-s29e.sh, FP8 step at
// context 512, two rounds): 8 splits 2.46, 2.47 ms against 2.50, 2.48
// with 4 (256 rows a split) and 2.51, 2.52 with 2; BF16 4.06 with 8 and
// 4, 4.11 with 2.
const clusterRows = 64

// clusterKernel is the name of base's cluster twin of cs splits.
func clusterKernel(base string, cs int) string {
	return fmt.Sprintf("attn_decode_pipe_d128_%sc%d_bf16", base, cs)
}

// decodeClusterFromEnv is the default of Backend.NoDecodeCluster
// (FT_DECODE_CLUSTER=0), Backend.DecodeClusterSplits (=2, 4 or 8) and
// Backend.DecodeClusterWarps (FT_DECODE_CLUSTER_WARPS=4 or 8); envSwitches
// lists the values.
func decodeClusterFromEnv() (off bool, splits, warps int) {
	v := os.Getenv("FT_DECODE_CLUSTER")
	if n, err := strconv.Atoi(v); err == nil && n > 1 {
		splits = n
	}
	warps, _ = strconv.Atoi(os.Getenv("FT_DECODE_CLUSTER_WARPS"))
	return v == "0", splits, warps
}

// variantNamed is the compiled head-width-128 variant named name.
func variantNamed(name string) (pipeVariant, bool) {
	for _, v := range pipeVariants {
		if v.D == 128 && v.Name() == name {
			return v, true
		}
	}
	return pipeVariant{}, false
}

// sizeClusters lets each cluster twin take its base variant's shared
// memory, dropping those the driver refuses it (and all of a base whose
// own kernels were dropped).
func (k *decodeMMAKernels) sizeClusters() {
	for key, f := range k.cluster {
		v, ok := variantNamed(key.base)
		pk := k.pipe[v]
		if f == nil || !ok || pk == nil || f.SetMaxDynamicSharedMemory(pk.maxSmem) != nil {
			delete(k.cluster, key)
		}
	}
}

// clusterFor is the cluster twin, its split count and its base variant
// for a one-token decode by variant v over a contiguous cache of capacity
// rows, or nil: only where v is the short-cache default picked by
// capacity (no FT_DECODE_VARIANT, no fixed FT_DECODE_SPLITS), the GPU is
// sm_90, the switch is on (Backend.NoDecodeCluster) and capacity ≤
// contigShortCap; the fewest compiled splits of at most clusterRows rows
// each (the most compiled where none keeps to it), or
// Backend.DecodeClusterSplits where set; the base is v, or its 4-warp
// sibling with Backend.DecodeClusterWarps = 4.
func (b *Backend) clusterFor(v pipeVariant, capacity int) (*cuda.Function, int, pipeVariant) {
	if b.NoDecodeCluster || b.DecodePipeVariant != "" || b.DecodePipeSplits > 0 || v.D != 128 || v.Name() != contigPipeShort ||
		capacity > contigShortCap || b.dev.ComputeCapability() != 90 {
		return nil, 0, v
	}
	base := v
	if b.DecodeClusterWarps == 4 {
		w4, ok := variantNamed(clusterBases[1])
		if !ok {
			return nil, 0, v
		}
		base = w4
	}
	pick := func(cs int) (*cuda.Function, int, pipeVariant) {
		if f := b.k.decodeMMA.cluster[clusterKey{base.Name(), cs}]; f != nil {
			return f, cs, base
		}
		return nil, 0, v
	}
	if cs := b.DecodeClusterSplits; cs > 0 {
		return pick(cs)
	}
	for i, cs := range clusterSplits {
		if capacity <= cs*clusterRows || i == len(clusterSplits)-1 {
			return pick(cs)
		}
	}
	return nil, 0, v
}

// attentionCluster is the one-token decode over a contiguous cache [C,K,d]
// through the cluster twin f of cs splits: one launch of K × cs blocks.
func (b *Backend) attentionCluster(f *cuda.Function, cs int, v pipeVariant, outP, qP, kP, vP uintptr, H, K, d, pos0, window int,
	kvBytes int64) error {
	scale := float32(math.Log2E / math.Sqrt(float64(d)))
	posp, p0 := b.posArgs(pos0)
	return f.LaunchBytes(b.s, kvBytes, cuda.Dim3{X: K, Y: cs, Z: 1}, cuda.Dim3{X: 32 * v.W}, v.smem(cs, H/K),
		cuda.Ptr(outP), cuda.Ptr(0), cuda.Ptr(0), cuda.Ptr(0), cuda.Ptr(qP), cuda.Ptr(kP), cuda.Ptr(vP),
		cuda.I32(H), cuda.I32(K), cuda.I32(cs), cuda.I32(0), posp, p0, cuda.F32(scale), cuda.I32(window))
}
