//go:build cuda

package cudabackend

import (
	"fmt"
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// TestL2AheadKernels: with a region set (SetL2Ahead: one 24 MiB weight, or
// two of 4 MiB as gate·up gets), RMSNorm of one F32 row (its _ahead kernel
// with extra prefetch-only blocks) and one-token decode attention over a
// contiguous cache at head width 128 (the s3w4h1t and s2w4h1t _ahead
// twins, context 511 and 4097) write the same bits as with none, and the
// twins are loaded (the test cannot pass by running the plain kernels
// only). Under a second.
func TestL2AheadKernels(t *testing.T) {
	needGPU(t)
	for _, v := range []string{"s3w4h1t", "s2w4h1t"} {
		if gb.k.ahead.tr[v] == nil {
			t.Fatalf("no _ahead twin of decode variant %s", v)
		}
	}
	rng := newRNG(t)
	big := gpu(t, runtime.BF16, make([]float32, 12<<20), 3<<10, 4<<10) // 24 MiB
	small := gpu(t, runtime.BF16, make([]float32, 2<<20), 512, 4<<10)  // 4 MiB
	regions := map[string][]kernels.L2Region{
		"one": {{T: big, Bytes: big.NumBytes()}},
		"two": {{T: small, Bytes: small.NumBytes()}, {T: big, Bytes: 4 << 20}},
	}
	run := func(rs []kernels.L2Region, op func() error) {
		t.Helper()
		if err := gb.SetL2Ahead(rs...); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := gb.SetL2Ahead(); err != nil {
				t.Fatal(err)
			}
		}()
		if err := op(); err != nil {
			t.Fatal(err)
		}
	}
	for _, last := range []bool{false, true} {
		gb.L2AheadLast = last
		// RMSNorm, width 4096 (Llama-3-8B) and 1024.
		for _, dim := range []int{4096, 1024} {
			x := gpu(t, runtime.F32, randBF16(rng, dim, 3), 1, dim)
			w := gpu(t, runtime.BF16, randBF16(rng, dim, 1), dim)
			norm := func(rs []kernels.L2Region) []float32 {
				out := poisoned(t, runtime.BF16, 1, dim)
				run(rs, func() error { return gb.RMSNorm(out, x, w, 1e-5) })
				return read(t, out)
			}
			want := norm(nil)
			for name, rs := range regions {
				if got := norm(rs); !slices.Equal(got, want) {
					t.Errorf("RMSNorm width %d, regions %s, evict_last %v: differs from no prefetch", dim, name, last)
				}
			}
		}
		// Decode attention, Llama-3-8B heads.
		for _, pos0 := range []int{510, 4096} {
			const C, H, K, d = 8192, 32, 8, 128
			gkc, gvc, _, _, q := contigDecode(t, rng, pos0+1, C, H, K, d)
			gq := gpu(t, runtime.BF16, q, 1, H, d)
			for _, v := range []string{"", "s2w4h1t"} {
				gb.DecodePipeVariant = v
				attend := func(rs []kernels.L2Region) []float32 {
					out := poisoned(t, runtime.BF16, 1, H, d)
					run(rs, func() error { return gb.Attention(out, gq, gkc, gvc, pos0) })
					return read(t, out)
				}
				want := attend(nil)
				for name, rs := range regions {
					for rep := range 2 {
						if got := attend(rs); !slices.Equal(got, want) {
							t.Errorf("%s", fmt.Sprintf("attention pos %d variant %q regions %s evict_last %v run %d: differs from no prefetch", pos0, v, name, last, rep))
						}
					}
				}
			}
			gb.DecodePipeVariant = ""
		}
	}
	gb.L2AheadLast = false
}

// TestL2AheadRegionErrors: SetL2Ahead refuses three regions, a region of
// more bytes than its tensor and one with no tensor, naming what is wrong.
func TestL2AheadRegionErrors(t *testing.T) {
	needGPU(t)
	w := gpu(t, runtime.BF16, make([]float32, 1024), 1024)
	for _, rs := range [][]kernels.L2Region{
		{{T: w, Bytes: 128}, {T: w, Bytes: 128}, {T: w, Bytes: 128}},
		{{T: w, Bytes: w.NumBytes() + 1}},
		{{Bytes: 128}},
	} {
		if err := gb.SetL2Ahead(rs...); err == nil {
			t.Errorf("SetL2Ahead(%d regions): no error", len(rs))
		}
	}
	if err := gb.SetL2Ahead(); err != nil {
		t.Fatal(err)
	}
}
