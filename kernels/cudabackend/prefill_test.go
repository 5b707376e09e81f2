//go:build cuda

package cudabackend

import (
	"fmt"
	"math"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// withFlash runs f with Backend.LegacyFlash set to legacy, restoring the
// environment's default after.
func withFlash(legacy bool, f func()) {
	gb.LegacyFlash = legacy
	defer func() { gb.LegacyFlash = legacyFlashFromEnv() }()
	f()
}

// withPrefill runs f with prefill attention through mode: "legacy"
// (Backend.LegacyFlash) or a prefill variant's name (Backend.PrefillVariant),
// restoring the environment's defaults after.
func withPrefill(mode string, f func()) {
	gb.LegacyFlash = mode == "legacy"
	gb.PrefillVariant = ""
	if mode != "legacy" {
		gb.PrefillVariant = mode
	}
	defer func() { gb.LegacyFlash, gb.PrefillVariant = legacyFlashFromEnv(), prefillVariantFromEnv() }()
	f()
}

// prefillModes are the modes withPrefill takes for head width d: the
// legacy kernels, the automatic choice and every variant built for d.
func prefillModes(d int) []string {
	modes := []string{"legacy", "auto"}
	for _, v := range prefillVariants {
		if v.hasWidth(d) {
			modes = append(modes, v.name)
		}
	}
	return modes
}

// TestPrefillAttentionKernels: prefill attention over a contiguous cache
// through prefill.cu's kernels, every variant of prefill_variants.cu (head
// width 128; FT_PREFILL_VARIANT) and prefill_fa2.cu (fa2: head widths 64
// and 128; other widths fall back to base), the automatic choice and the legacy
// kernels, against the CPU reference: T not a multiple of 64 or 128, a
// prefix already in the cache (chunked prefill), sliding windows (narrower
// than a tile, as wide as the context, one and three positions), 1, 2, 4 and
// 8 query heads per KV head, head widths 32, 64 and 128; cache rows past the
// context are NaN and must not be read.
func TestPrefillAttentionKernels(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	for _, c := range []struct {
		T, pos0, C, H, K, d, window int
	}{
		{2, 0, 2, 4, 1, 128, 0},
		{77, 0, 100, 8, 2, 128, 0},
		{128, 0, 128, 8, 1, 128, 0},
		{200, 0, 256, 8, 1, 128, 0},
		{300, 150, 460, 4, 4, 64, 0},
		{129, 0, 129, 4, 2, 32, 0},
		{1000, 24, 1024, 32, 8, 128, 0},
		{257, 64, 330, 8, 8, 128, 0},
		{300, 100, 400, 8, 2, 128, 50},
		{513, 0, 513, 8, 1, 128, 200},
		{200, 37, 240, 4, 4, 64, 1},
		{130, 5, 135, 4, 1, 32, 3},
		{190, 10, 200, 8, 2, 128, 1000},
		{150, 20, 170, 4, 2, 128, 1},
		{97, 40, 140, 4, 4, 128, 3},
		// Several 64-key tiles per query tile (fa2 at both widths): windows
		// of a tile's width and wider than a tile, eight query heads a KV
		// head, a cached prefix.
		{333, 0, 333, 8, 2, 64, 0},
		{1000, 0, 1000, 8, 1, 64, 300},
		{700, 0, 700, 16, 2, 128, 100},
		{640, 90, 800, 8, 8, 128, 64},
		// Several 128-key tiles per query tile (wg): a long causal prompt
		// with a cached prefix not a multiple of a tile, and head width 64.
		{2100, 37, 2200, 8, 4, 128, 0},
		{1100, 0, 1100, 8, 2, 64, 0},
	} {
		// The data, the cache and the CPU reference once per case; the
		// kernels in turn.
		t.Run(fmt.Sprintf("T%d at %d H%d K%d d%d window %d", c.T, c.pos0, c.H, c.K, c.d, c.window), func(t *testing.T) {
			n := c.pos0 + c.T
			q := randBF16(rng, c.T*c.H*c.d, 2)
			kv := randBF16(rng, 2*c.C*c.K*c.d, 2)
			kc, vc := kv[:c.C*c.K*c.d], kv[c.C*c.K*c.d:]
			gkc, gvc := poisoned(t, runtime.BF16, c.C, c.K, c.d), poisoned(t, runtime.BF16, c.C, c.K, c.d)
			row := c.K * c.d
			gkcFill, err := gkc.Slice(0, n)
			if err != nil {
				t.Fatal(err)
			}
			gvcFill, _ := gvc.Slice(0, n)
			if err := gb.WriteBytes(gkcFill, bf16Bytes(kc[:n*row])); err != nil {
				t.Fatal(err)
			}
			if err := gb.WriteBytes(gvcFill, bf16Bytes(vc[:n*row])); err != nil {
				t.Fatal(err)
			}
			gq := gpu(t, runtime.BF16, q, c.T, c.H, c.d)
			ref := host(t, runtime.F32, nil, c.T, c.H, c.d)
			if err := cb.AttentionWindow(ref, host(t, runtime.F32, q, c.T, c.H, c.d), host(t, runtime.F32, kc, c.C, c.K, c.d),
				host(t, runtime.F32, vc, c.C, c.K, c.d), c.pos0, c.window); err != nil {
				t.Fatal(err)
			}
			for _, mode := range prefillModes(c.d) {
				t.Run(mode, func(t *testing.T) {
					out := poisoned(t, runtime.BF16, c.T, c.H, c.d)
					var err error
					withPrefill(mode, func() { err = gb.AttentionWindow(out, gq, gkc, gvc, c.pos0, c.window) })
					if err != nil {
						t.Fatal(err)
					}
					compare(t, "Attention", read(t, out), ref.F32(), 1e-2, 2e-2)
				})
			}
		})
	}
}

// TestVarlenPrefillKernels: packed sequences of unequal lengths (1 query
// among them, tiles of exactly 128, a prefix already cached) over a paged
// pool with shuffled block tables, through prefill.cu's varlen kernel,
// every variant (head width 128; fa2 also 64), the automatic choice and the
// legacy kernel, against the CPU reference; windows narrower and wider than
// a 64-key tile, 1 to 8 query heads a KV head.
func TestVarlenPrefillKernels(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	for _, c := range []struct {
		name                string
		H, K, d, bs, window int
		seqs                []pagedSeq
	}{
		{"d128 G4", 32, 8, 128, 16, 0, []pagedSeq{{1, 1}, {300, 300}, {129, 129}, {77, 200}, {1, 50}, {128, 128}, {513, 513}}},
		{"d128 G1 window 100", 4, 4, 128, 16, 100, []pagedSeq{{257, 300}, {1, 1}, {200, 200}, {3, 700}}},
		{"d128 G2 window 3", 4, 2, 128, 8, 3, []pagedSeq{{70, 70}, {33, 90}, {1, 1}, {129, 129}}},
		{"d64 G1 window 40", 4, 4, 64, 16, 40, []pagedSeq{{130, 167}, {65, 65}, {3, 500}, {1, 1}}},
		{"d64 G8", 8, 1, 64, 8, 0, []pagedSeq{{255, 255}, {2, 2}, {129, 400}}},
		{"d32 G8 window 3", 8, 1, 32, 4, 3, []pagedSeq{{23, 23}, {12, 30}, {1, 1}, {140, 140}}},
		{"d128 G8 window 70", 8, 1, 128, 16, 70, []pagedSeq{{383, 383}, {5, 260}, {129, 129}, {64, 64}, {1, 1000}}},
		{"d64 G2", 8, 4, 64, 32, 0, []pagedSeq{{700, 700}, {1, 1}, {256, 300}, {65, 65}}},
		{"d128 G4 long", 16, 4, 128, 16, 0, []pagedSeq{{1000, 1000}, {513, 900}, {2, 2}, {256, 256}, {127, 127}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			kv, qStarts, kp, vp, P := pagedLayout(rng, c.seqs, c.K, c.d, c.bs)
			T := int(qStarts[len(c.seqs)])
			q := randBF16(rng, T*c.H*c.d, 2)
			ref := host(t, runtime.F32, nil, T, c.H, c.d)
			hk, hv := host(t, runtime.F32, kp, P, c.K, c.d), host(t, runtime.F32, vp, P, c.K, c.d)
			if err := cb.VarlenPrefillAttention(ref, host(t, runtime.F32, q, T, c.H, c.d), hk, hv, qStarts, kv, c.window); err != nil {
				t.Fatal(err)
			}
			gq := gpu(t, runtime.BF16, q, T, c.H, c.d)
			gk, gv := gpu(t, runtime.BF16, kp, P, c.K, c.d), gpu(t, runtime.BF16, vp, P, c.K, c.d)
			for _, mode := range prefillModes(c.d) {
				t.Run(mode, func(t *testing.T) {
					out := poisoned(t, runtime.BF16, T, c.H, c.d)
					var err error
					withPrefill(mode, func() { err = gb.VarlenPrefillAttention(out, gq, gk, gv, qStarts, kv, c.window) })
					if err != nil {
						t.Fatal(err)
					}
					compare(t, "VarlenPrefillAttention", read(t, out), ref.F32(), 1e-2, 2e-2)
				})
			}
		})
	}
}

// TestPrefillVariantOccupancy: every prefill kernel of head width 128 (and
// 64 where a variant other than base has it: fa2) runs as many blocks per
// SM as its variant is built for (registers within its launch bounds,
// shared memory allowed), and logs the numbers.
func TestPrefillVariantOccupancy(t *testing.T) {
	needGPU(t)
	for _, v := range prefillVariants {
		for _, d := range []int{64, 128} {
			if !v.hasWidth(d) || (d != 128 && v.allWidths) || (v.sm90a && gb.dev.ComputeCapability() != 90) {
				continue
			}
			for _, varlen := range []bool{false, true} {
				f := gb.prefillKernel(v, d, varlen)
				if f == nil {
					t.Fatalf("%s: no kernel %s", v.name, v.kernel(d, varlen))
				}
				n, err := f.MaxActiveBlocksPerSM(v.threads, v.smem(d))
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%s: %d blocks of %d threads and %d B per SM", f.Name(), n, v.threads, v.smem(d))
				if n < v.perSM {
					t.Errorf("%s: %d blocks per SM, built for %d", f.Name(), n, v.perSM)
				}
			}
		}
	}
}

// TestRoPEStoreV8MatchesLegacy: the vectorised RoPE + KV store kernels give
// the scalar kernels' bits (q, k and the cache rows), contiguous and paged,
// for head widths 32, 64, 80 and 128.
func TestRoPEStoreV8MatchesLegacy(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	const H, K, T, pos0, C = 8, 2, 37, 1000, 1100
	for _, d := range []int{32, 64, 80, 128} {
		t.Run(fmt.Sprint("d", d), func(t *testing.T) {
			inv := ropeTables(t, d)["llama3"]
			q, k, v := randBF16(rng, T*H*d, 2), randBF16(rng, T*K*d, 2), randBF16(rng, T*K*d, 2)
			positions, slots := make([]int32, T), make([]int32, T)
			for i := range T {
				positions[i], slots[i] = int32(rng.IntN(20000)), int32((i*7+3)%C)
			}
			type result struct{ q, k, kc, vc, pq, pk, pkc, pvc []float32 }
			run := func(legacy bool) result {
				var r result
				withFlash(legacy, func() {
					gq, gk, gv := gpu(t, runtime.BF16, q, T, H, d), gpu(t, runtime.BF16, k, T, K, d), gpu(t, runtime.BF16, v, T, K, d)
					kc, vc := poisoned(t, runtime.BF16, C, K, d), poisoned(t, runtime.BF16, C, K, d)
					if err := gb.RoPEStoreKV(gq, gk, gv, kc, vc, pos0, inv); err != nil {
						t.Fatal(err)
					}
					r.q, r.k, r.kc, r.vc = read(t, gq), read(t, gk), read(t, kc), read(t, vc)
					gq, gk, gv = gpu(t, runtime.BF16, q, T, H, d), gpu(t, runtime.BF16, k, T, K, d), gpu(t, runtime.BF16, v, T, K, d)
					kp, vp := poisoned(t, runtime.BF16, C, K, d), poisoned(t, runtime.BF16, C, K, d)
					if err := gb.RoPEStoreKVAt(gq, gk, gv, kp, vp, positions, slots, inv); err != nil {
						t.Fatal(err)
					}
					r.pq, r.pk, r.pkc, r.pvc = read(t, gq), read(t, gk), read(t, kp), read(t, vp)
				})
				return r
			}
			got, want := run(false), run(true)
			for _, c := range []struct {
				n    string
				g, w []float32
			}{{"q", got.q, want.q}, {"k", got.k, want.k}, {"k cache", got.kc, want.kc}, {"v cache", got.vc, want.vc},
				{"paged q", got.pq, want.pq}, {"paged k", got.pk, want.pk}, {"k pool", got.pkc, want.pkc}, {"v pool", got.pvc, want.pvc}} {
				for i := range c.w {
					if math.Float32bits(c.g[i]) != math.Float32bits(c.w[i]) {
						t.Fatalf("%s element %d: %v, the scalar kernel's %v", c.n, i, c.g[i], c.w[i])
					}
				}
			}
		})
	}
}

// timeGPU reports op's device time a call (CUDA events around b.N calls
// after one untimed), and its TFLOP/s and GB/s where flops and bytes are
// given.
func timeGPU(b *testing.B, flops, bytes float64, op func() error) {
	s := gdev.ComputeStream()
	if err := op(); err != nil {
		b.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start, _ := s.RecordEvent()
	for i := 0; i < b.N; i++ {
		if err := op(); err != nil {
			b.Fatal(err)
		}
	}
	end, _ := s.RecordEvent()
	if err := end.Synchronize(); err != nil {
		b.Fatal(err)
	}
	el, _ := end.ElapsedSince(start)
	sec := el.Seconds() / float64(b.N)
	b.ReportMetric(sec*1e3, "ms/op")
	if flops > 0 {
		b.ReportMetric(flops/sec/1e12, "TFLOP/s")
	}
	if bytes > 0 {
		b.ReportMetric(bytes/sec/1e9, "GB/s")
	}
}

// BenchmarkPrefillAttention times Llama-3-8B's prefill attention (32 heads,
// 8 KV heads, d 128): one sequence of 8,192 tokens over a contiguous cache
// and 64 sequences × 512 tokens packed over a paged pool, with the legacy
// kernels, the automatic choice and every prefill variant (TFLOP/s counts the causal half of Q·Kᵀ and
// P·V); and the RoPE + KV store of 8,192 tokens (GB/s of q, k, v read and
// q, k and both cache rows written).
//
//	go test -tags cuda -run '^$' -bench PrefillAttention ./kernels/cudabackend
func BenchmarkPrefillAttention(b *testing.B) {
	if noGPU != nil {
		b.Skipf("no GPU: %v", noGPU)
	}
	if setupErr != nil {
		b.Fatal(setupErr)
	}
	const H, K, d = 32, 8, 128
	tensor := func(shape ...int) *runtime.Tensor {
		t, err := runtime.NewTensor(gdev, runtime.BF16, shape, "prefill bench")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(t.Buffer().Free)
		if err := gb.FillUniform(t, 7, -1, 1); err != nil {
			b.Fatal(err)
		}
		return t
	}
	causal := func(n int) float64 { return 4 * float64(n) * float64(n+1) / 2 * H * d }
	for _, mode := range prefillModes(d) {
		name := mode
		b.Run(name+"/8192", func(b *testing.B) {
			const T = 8192
			q, out, kc, vc := tensor(T, H, d), tensor(T, H, d), tensor(T, K, d), tensor(T, K, d)
			withPrefill(mode, func() {
				timeGPU(b, causal(T), 0, func() error { return gb.Attention(out, q, kc, vc, 0) })
			})
		})
		b.Run(name+"/varlen-64x512", func(b *testing.B) {
			const N, L, bs = 64, 512, 16
			T := N * L
			q, out, kp, vp := tensor(T, H, d), tensor(T, H, d), tensor(T, K, d), tensor(T, K, d)
			kv := kernels.PagedKV{BlockSize: bs, MaxBlocks: L / bs}
			qStarts := []int32{0}
			for s := range N {
				kv.SeqLens = append(kv.SeqLens, L)
				qStarts = append(qStarts, int32((s+1)*L))
				for j := range L / bs {
					kv.BlockTable = append(kv.BlockTable, int32(s*L/bs+j))
				}
			}
			withPrefill(mode, func() {
				timeGPU(b, N*causal(L), 0, func() error { return gb.VarlenPrefillAttention(out, q, kp, vp, qStarts, kv, 0) })
			})
		})
		if mode != "legacy" && mode != "auto" { // the RoPE + store kernels do not depend on the variant
			continue
		}
		b.Run(name+"/rope-store-8192", func(b *testing.B) {
			const T = 8192
			q, k, v, kc, vc := tensor(T, H, d), tensor(T, K, d), tensor(T, K, d), tensor(T, K, d), tensor(T, K, d)
			inv, err := kernels.RopeInvFreq(d, 500000, kernels.RopeScaling{Type: "default"})
			if err != nil {
				b.Fatal(err)
			}
			bytes := float64(T) * 2 * (2*H*d + 2*K*d + K*d + 2*K*d)
			withPrefill(mode, func() {
				timeGPU(b, 0, bytes, func() error { return gb.RoPEStoreKV(q, k, v, kc, vc, 0, inv) })
			})
		})
	}
}

// TestPrefillWGModule: on compute capability 9.0 the sm_90a module of the
// wgmma prefill kernels (variants wg and wg6) compiles and loads, with every
// kernel the backend launches, their blocks fitting an SM and their
// registers not spilling (elsewhere the variants fall back to fa2, which
// this checks too). Run it first: a PTX error shows here in seconds.
func TestPrefillWGModule(t *testing.T) {
	needGPU(t)
	for _, wg := range prefillVariants {
		if wg.sm90a {
			t.Run(wg.name, func(t *testing.T) { testPrefillWGModule(t, wg) })
		}
	}
}

// testPrefillWGModule is TestPrefillWGModule for the sm90a variant wg.
func testPrefillWGModule(t *testing.T, wg prefillVariant) {
	for _, d := range []int{64, 128} {
		if !wg.hasWidth(d) {
			continue
		}
		for _, varlen := range []bool{false, true} {
			f := gb.prefillKernel(wg, d, varlen)
			if gb.dev.ComputeCapability() != 90 {
				if f != nil {
					t.Errorf("%s loaded on compute capability %d", wg.kernel(d, varlen), gb.dev.ComputeCapability())
				}
				if got := gb.availablePrefill(wg, d, varlen); got.name != "fa2" {
					t.Errorf("%s d%d varlen %v falls back to %s, want fa2", wg.name, d, varlen, got.name)
				}
				continue
			}
			if f == nil {
				t.Fatalf("%s: sm_90a module not loaded: %v", wg.kernel(d, varlen), gb.k.prefill.wg[wg.extra].err)
			}
			n, err := f.MaxActiveBlocksPerSM(wg.threads, wg.smem(d))
			if err != nil {
				t.Fatal(err)
			}
			regs, local, err := f.Resources()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d blocks of %d threads and %d B per SM, %d registers, %d B of local memory a thread", f.Name(), n,
				wg.threads, wg.smem(d), regs, local)
			if local > 0 {
				t.Errorf("%s: %d B of local memory a thread: its registers spill (s21f: wg and wg6 have none)", f.Name(), local)
			}
			if n < wg.perSM {
				t.Errorf("%s: %d blocks per SM, want %d", f.Name(), n, wg.perSM)
			}
		}
	}
}
