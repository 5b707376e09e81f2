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
// and the cluster's blocks exchange them through distributed shared
// memory (clusterKey: pushed into the blocks that own the outputs by
// default), where the pipelined kernel writes every split's partials to
// global memory, fences, counts the finished splits with an atomic and
// lets the last block read them back. Why: in s29c's block trace (FP8
// step at context 512, H200) ~6 µs of the attention's 8.7 µs a layer on
// the critical path lay between a warp's last key group and the merged
// output, in those dependent round trips.

// clusterSplits are the compiled cluster sizes (splits a KV head).
var clusterSplits = []int{2, 4, 8}

// clusterKey names one cluster twin of contigPipeShort: its split count
// and how its splits merge (push: decode_cluster_push, where each block
// stores its partials into the blocks that own the outputs and the
// cluster meets once; else decode_cluster_merge, where each block reads
// the others' partials between two meetings, Backend.DecodeClusterPull:
// an A/B switch). Measured on the H200 (FP8 step at context 512): push
// 2.425, 2.414 ms against 2.445, 2.442 (bench/h200-s30b.sh), 2.433–2.436
// against 2.454, 2.452 (s30c).
type clusterKey struct {
	cs   int
	push bool
}

// clusterRows is the most cache rows a split of a cluster twin covers at
// full capacity: clusterFor takes the fewest splits that keep to it (8
// from 257 rows up, also past 8·64). Measured on the H200 (bench/h200-s29e.sh, FP8 step at
// context 512, two rounds): 8 splits 2.46, 2.47 ms against 2.50, 2.48
// with 4 (256 rows a split) and 2.51, 2.52 with 2; BF16 4.06 with 8 and
// 4, 4.11 with 2.
const clusterRows = 64

// clusterKernel is the name of contigPipeShort's cluster twin of cs
// splits (push: the push-merge twin).
func clusterKernel(cs int, push bool) string {
	m := "c"
	if push {
		m = "q"
	}
	return fmt.Sprintf("attn_decode_pipe_d128_%s%s%d_bf16", contigPipeShort, m, cs)
}

// decodeClusterFromEnv is the default of Backend.NoDecodeCluster
// (FT_DECODE_CLUSTER=0), Backend.DecodeClusterSplits (=2, 4 or 8) and
// Backend.DecodeClusterPull (FT_DECODE_CLUSTER_PUSH=0); envSwitches lists
// the values.
func decodeClusterFromEnv() (off bool, splits int, pull bool) {
	v := os.Getenv("FT_DECODE_CLUSTER")
	if n, err := strconv.Atoi(v); err == nil && n > 1 {
		splits = n
	}
	return v == "0", splits, os.Getenv("FT_DECODE_CLUSTER_PUSH") == "0"
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

// sizeClusters lets each cluster twin take contigPipeShort's shared
// memory, dropping those the driver refuses it (and all of them where
// contigPipeShort's own kernels were dropped).
func (k *decodeMMAKernels) sizeClusters() {
	v, ok := variantNamed(contigPipeShort)
	pk := k.pipe[v]
	for key, f := range k.cluster {
		if f == nil || !ok || pk == nil || f.SetMaxDynamicSharedMemory(pk.maxSmem) != nil {
			delete(k.cluster, key)
		}
	}
}

// clusterSmem is the dynamic shared memory of a cluster twin's launch with
// cs splits and G query heads a KV head: v.smem's, or for a push twin the
// ring or the warps' scratch (so[W][8][D] floats), whichever is larger,
// then the receive area (decode_cluster_push: G·D partial outputs and
// cs·8 (m, l) pairs).
func clusterSmem(v pipeVariant, cs, G int, push bool) int {
	if !push {
		return v.smem(cs, G)
	}
	return max(v.ring(), 4*v.W*8*v.D) + 4*(G*v.D+16*cs)
}

// clusterFor is the cluster twin and its split count for a one-token
// decode by variant v over a contiguous cache of capacity rows with G
// query heads a KV head, or nil: only where v is the short-cache default
// picked by capacity (no FT_DECODE_VARIANT, no fixed FT_DECODE_SPLITS),
// the GPU is sm_90, the switch is on (Backend.NoDecodeCluster) and
// capacity ≤ contigShortCap; the fewest compiled splits of at most
// clusterRows rows each (the most compiled where none keeps to it), or
// Backend.DecodeClusterSplits where set; the push twin where its shared
// memory fits, unless Backend.DecodeClusterPull (push: it is).
func (b *Backend) clusterFor(v pipeVariant, capacity, G int) (f *cuda.Function, cs int, push bool) {
	if b.NoDecodeCluster || b.DecodePipeVariant != "" || b.DecodePipeSplits > 0 || v.D != 128 || v.Name() != contigPipeShort ||
		capacity > contigShortCap || b.dev.ComputeCapability() != 90 {
		return nil, 0, false
	}
	pick := func(cs int) (*cuda.Function, int, bool) {
		push := !b.DecodeClusterPull
		if pk := b.k.decodeMMA.pipe[v]; push && (pk == nil || clusterSmem(v, cs, G, true) > pk.maxSmem) {
			push = false
		}
		if f := b.k.decodeMMA.cluster[clusterKey{cs, push}]; f != nil {
			return f, cs, push
		}
		return nil, 0, false
	}
	if cs := b.DecodeClusterSplits; cs > 0 {
		return pick(cs)
	}
	for i, cs := range clusterSplits {
		if capacity <= cs*clusterRows || i == len(clusterSplits)-1 {
			return pick(cs)
		}
	}
	return nil, 0, false
}

// attentionCluster is the one-token decode over a contiguous cache [C,K,d]
// through the cluster twin f of cs splits (push: a push twin): one launch
// of K × cs blocks.
func (b *Backend) attentionCluster(f *cuda.Function, cs int, push bool, v pipeVariant, outP, qP, kP, vP uintptr, H, K, d, pos0,
	window int, kvBytes int64) error {
	scale := float32(math.Log2E / math.Sqrt(float64(d)))
	posp, p0 := b.posArgs(pos0)
	return f.LaunchBytes(b.s, kvBytes, cuda.Dim3{X: K, Y: cs, Z: 1}, cuda.Dim3{X: 32 * v.W}, clusterSmem(v, cs, H/K, push),
		cuda.Ptr(outP), cuda.Ptr(0), cuda.Ptr(0), cuda.Ptr(0), cuda.Ptr(qP), cuda.Ptr(kP), cuda.Ptr(vP),
		cuda.I32(H), cuda.I32(K), cuda.I32(cs), cuda.I32(0), posp, p0, cuda.F32(scale), cuda.I32(window))
}
