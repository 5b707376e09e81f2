//go:build cuda

package cudabackend

import (
	"fmt"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// TestDecodeClusterGPU: one-token decode attention over caches of at most
// contigShortCap rows takes the cluster twin of the fewest splits of at
// most clusterRows rows (none past that, with FT_DECODE_CLUSTER=0, a
// variant or split count given), and its outputs match the CPU reference
// (rows past the position NaN; FT_DECODE_CLUSTER=2 forces 2 splits):
// capacities 20 to 2,048 (2, 4 and 8 splits), positions at the first rows, on and around the 16-row groups
// and the splits' edges and the last row, 4 and 8 query heads per KV head,
// with and without a sliding window, the 8-warp twins and the 4-warp
// ones (FT_DECODE_CLUSTER_WARPS=4); each position twice (a cluster
// barrier or shared-memory read gone wrong would show as a hang, a
// poisoned output or a wrong value). A graph captured at one position
// replays at others.
func TestDecodeClusterGPU(t *testing.T) {
	needGPU(t)
	if gb.dev.ComputeCapability() != 90 {
		t.Skip("the cluster twins run on sm_90 only")
	}
	rng := newRNG(t)
	v, _, err := gb.pipeFor(128, 8, true, 512)
	if err != nil || v.Name() != contigPipeShort {
		t.Fatalf("pipeFor(512) = %s, %v; want %s", v.Name(), err, contigPipeShort)
	}
	for _, c := range []struct{ capacity, cs int }{{1, 2}, {128, 2}, {129, 4}, {256, 4}, {257, 8}, {535, 8}, {2048, 8}, {2049, 0}} {
		f, cs, base := gb.clusterFor(v, c.capacity)
		if cs != c.cs || (f == nil) != (c.cs == 0) || base.Name() != contigPipeShort {
			t.Errorf("clusterFor(%d) = %v, %d, %s; want %d splits of %s", c.capacity, f != nil, cs, base.Name(), c.cs, contigPipeShort)
		}
	}
	for _, off := range []func(){
		func() { gb.NoDecodeCluster = true },
		func() { gb.DecodePipeVariant = contigPipeShort },
		func() { gb.DecodePipeSplits = 2 },
	} {
		off()
		f, _, _ := gb.clusterFor(v, 512)
		gb.NoDecodeCluster, gb.DecodePipeVariant, gb.DecodePipeSplits = false, "", 0
		if f != nil {
			t.Error("clusterFor took the twin with it switched off, a variant or a split count given")
		}
	}
	gb.DecodeClusterSplits, gb.DecodeClusterWarps = 2, 4
	if f, cs, base := gb.clusterFor(v, 512); f == nil || cs != 2 || base.Name() != clusterBases[1] {
		t.Errorf("clusterFor(512) with 2 splits and 4 warps forced = %v, %d, %s", f != nil, cs, base.Name())
	}
	gb.DecodeClusterSplits, gb.DecodeClusterWarps = 0, 0
	defer func() { gb.ForceMMADecode, gb.DecodeClusterWarps = false, 0 }()
	const H, d = 32, 128
	for _, c := range []struct{ K, warps int }{{8, 0}, {4, 0}, {8, 4}, {4, 4}} {
		K := c.K
		gb.ForceMMADecode = K == 4 // 8 query heads a KV head take the tensor cores only when forced
		gb.DecodeClusterWarps = c.warps
		for _, C := range []int{20, 300, 535, 2048} {
			t.Run(fmt.Sprintf("K%d_C%d_w%d", K, C, c.warps), func(t *testing.T) {
				gkc, gvc, kc, vc, q := contigDecode(t, rng, C, C, H, K, d)
				gq := gpu(t, runtime.BF16, q, 1, H, d)
				for _, pos := range []int{0, 1, 15, 16, 17, 127, 128, 255, 256, C / 2, C - 2, C - 1} {
					if pos >= C {
						continue
					}
					for _, window := range []int{0, 37} {
						ref := contigRef(t, q, kc, vc, pos, C, H, K, d, window)
						for range 2 {
							out := poisoned(t, runtime.BF16, 1, H, d)
							if err := gb.AttentionWindow(out, gq, gkc, gvc, pos, window); err != nil {
								t.Fatal(err)
							}
							compare(t, fmt.Sprintf("position %d, window %d", pos, window), read(t, out), ref, 1e-2, 2e-2)
						}
					}
				}
				if K != 8 || c.warps != 0 {
					return
				}
				out := poisoned(t, runtime.BF16, 1, H, d)
				graph, err := gb.CaptureStep(func() error { return gb.Attention(out, gq, gkc, gvc, 3) })
				if err != nil {
					t.Fatal(err)
				}
				defer graph.Close()
				for _, pos := range []int{C - 1, 7, C / 2, 0} {
					if err := gb.SetStep([]int32{0}, pos); err != nil {
						t.Fatal(err)
					}
					if err := graph.Replay(); err != nil {
						t.Fatal(err)
					}
					compare(t, fmt.Sprintf("replay at %d", pos), read(t, out), contigRef(t, q, kc, vc, pos, C, H, K, d, 0), 1e-2, 2e-2)
				}
			})
		}
	}
}
