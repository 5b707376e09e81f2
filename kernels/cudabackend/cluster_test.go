//go:build cuda

package cudabackend

import (
	"fmt"
	"math"
	"testing"

	kcuda "github.com/flextensor-go/flextensor/kernels/cuda"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// TestDecodeClusterGPU: one-token decode attention over caches of at most
// contigShortCap rows takes the cluster twin of the fewest splits of at
// most clusterRows rows (none past that, with FT_DECODE_CLUSTER=0, a
// variant or split count given), and its outputs match the CPU reference
// (rows past the position NaN; FT_DECODE_CLUSTER=2 forces 2 splits):
// capacities 20 to 2,048 (2, 4 and 8 splits), positions at the first
// rows, on and around the 16-row groups and the splits' edges and the
// last row, 4 and 8 query heads per KV head, with and without a sliding
// window; each position twice with either merge (a cluster barrier or
// shared-memory access gone wrong would show as a hang, a poisoned output
// or a wrong value), the push merge (the default) giving the remote-load
// merge's (FT_DECODE_CLUSTER_PUSH=0) bits. A graph captured at one position replays at
// others, with either merge.
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
	defer func() { gb.ForceMMADecode, gb.DecodeClusterPull = false, false }()
	for _, push := range []bool{false, true} {
		gb.DecodeClusterPull = !push
		for _, c := range []struct{ capacity, cs int }{{1, 2}, {128, 2}, {129, 4}, {256, 4}, {257, 8}, {535, 8}, {2048, 8}, {2049, 0}} {
			f, cs, p := gb.clusterFor(v, c.capacity, 4)
			if cs != c.cs || (f == nil) != (c.cs == 0) || p != (push && f != nil) {
				t.Errorf("clusterFor(%d) with push %v = %v, %d, push %v; want %d splits", c.capacity, push, f != nil, cs, p, c.cs)
			}
		}
	}
	gb.DecodeClusterPull = false
	for _, off := range []func(){
		func() { gb.NoDecodeCluster = true },
		func() { gb.DecodePipeVariant = contigPipeShort },
		func() { gb.DecodePipeSplits = 2 },
	} {
		off()
		f, _, _ := gb.clusterFor(v, 512, 4)
		gb.NoDecodeCluster, gb.DecodePipeVariant, gb.DecodePipeSplits = false, "", 0
		if f != nil {
			t.Error("clusterFor took the twin with it switched off, a variant or a split count given")
		}
	}
	gb.DecodeClusterSplits = 2
	if f, cs, _ := gb.clusterFor(v, 512, 4); f == nil || cs != 2 {
		t.Errorf("clusterFor(512) with 2 splits forced = %v, %d", f != nil, cs)
	}
	gb.DecodeClusterSplits = 0
	const H, d = 32, 128
	for _, K := range []int{8, 4} {
		gb.ForceMMADecode = K == 4 // 8 query heads a KV head take the tensor cores only when forced
		for _, C := range []int{20, 300, 535, 2048} {
			t.Run(fmt.Sprintf("K%d_C%d", K, C), func(t *testing.T) {
				gkc, gvc, kc, vc, q := contigDecode(t, rng, C, C, H, K, d)
				gq := gpu(t, runtime.BF16, q, 1, H, d)
				for _, pos := range []int{0, 1, 15, 16, 17, 127, 128, 255, 256, C / 2, C - 2, C - 1} {
					if pos >= C {
						continue
					}
					for _, window := range []int{0, 37} {
						ref := contigRef(t, q, kc, vc, pos, C, H, K, d, window)
						var pulled []float32
						for _, push := range []bool{false, true, false, true} {
							gb.DecodeClusterPull = !push
							out := poisoned(t, runtime.BF16, 1, H, d)
							if err := gb.AttentionWindow(out, gq, gkc, gvc, pos, window); err != nil {
								t.Fatal(err)
							}
							got := read(t, out)
							what := fmt.Sprintf("position %d, window %d, push %v", pos, window, push)
							compare(t, what, got, ref, 1e-2, 2e-2)
							if pulled == nil {
								pulled = got
							} else if i := firstBitDiff(got, pulled); i >= 0 {
								t.Fatalf("%s: output %d = %v, the remote-load merge gave %v (want the same bits)", what, i, got[i], pulled[i])
							}
						}
						gb.DecodeClusterPull = false
					}
				}
				if K != 8 {
					return
				}
				for _, push := range []bool{false, true} {
					gb.DecodeClusterPull = !push
					out := poisoned(t, runtime.BF16, 1, H, d)
					graph, err := gb.CaptureStep(func() error { return gb.Attention(out, gq, gkc, gvc, 3) })
					if err != nil {
						t.Fatal(err)
					}
					for _, pos := range []int{C - 1, 7, C / 2, 0} {
						if err := gb.SetStep([]int32{0}, pos); err != nil {
							t.Fatal(err)
						}
						if err := graph.Replay(); err != nil {
							t.Fatal(err)
						}
						compare(t, fmt.Sprintf("replay at %d, push %v", pos, push), read(t, out), contigRef(t, q, kc, vc, pos, C, H, K, d, 0), 1e-2, 2e-2)
					}
					graph.Close()
				}
				gb.DecodeClusterPull = false
			})
		}
	}
}

// firstBitDiff is the first index at which a and b differ in their bits
// (NaNs compared by bits too), or −1.
func firstBitDiff(a, b []float32) int {
	for i := range a {
		if i >= len(b) || math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	if len(b) > len(a) {
		return len(a)
	}
	return -1
}

// TestDependentLaunchDecodeKernels: the decode step's kernels that
// dependentLaunchKernels missed until session 30 (the cluster twins and
// the split argmax: each calls ft_pdl_wait before it touches what the
// kernel ahead writes) are declared for dependent launch; without it
// their blocks start only after the kernel ahead has completed (s30b's
// block trace: the attention ~0.8 µs after the RoPE kernel's end).
func TestDependentLaunchDecodeKernels(t *testing.T) {
	needGPU(t)
	fs := map[string]*cuda.Function{"argmax_rows_split": gb.k.argmaxSplit}
	for key, f := range gb.k.decodeMMA.cluster {
		fs[clusterKernel(key.cs, key.push)] = f
	}
	for name, f := range fs {
		if f == nil || !f.DependentLaunch() {
			t.Errorf("%s: not declared for dependent launch (or missing)", name)
		}
	}
}

// TestDependentLaunchMatchesSources: every kernel of the main module that
// is declared for dependent launch (dependentLaunchKernels) reaches
// ft_pdl_wait in its device code (kernels/cuda/dependent_launch.txt, kept
// true to the sources by TestDependentLaunchList); one that does not would
// race with the kernel ahead of it. And every kernel that reaches it is
// declared: one that is not loses the overlap with the kernel ahead (what
// the cluster twins and the split argmax lost until session 30).
func TestDependentLaunchMatchesSources(t *testing.T) {
	needGPU(t)
	if len(gb.k.loaded) == 0 {
		t.Fatal("the kernel set recorded no loaded functions")
	}
	var racing, undeclared []string
	for _, f := range gb.k.loaded {
		waits := kcuda.WaitsForDependentLaunch(f.Name())
		switch {
		case f.DependentLaunch() && !waits:
			racing = append(racing, f.Name())
		case !f.DependentLaunch() && waits:
			undeclared = append(undeclared, f.Name())
		}
	}
	if len(racing) > 0 {
		t.Errorf("declared for dependent launch without reaching ft_pdl_wait (they would race): %v", racing)
	}
	if len(undeclared) > 0 {
		t.Errorf("reach ft_pdl_wait but are not declared for dependent launch (kernels/cudabackend/pdl.go): %v", undeclared)
	}
	t.Logf("%d functions of the main module, %d declared", len(gb.k.loaded), len(gb.k.dependentLaunchKernels()))
}
