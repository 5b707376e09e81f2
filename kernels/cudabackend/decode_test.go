//go:build cuda

package cudabackend

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// decodeMode is one way through one-query decode attention: the pipelined
// tensor-core kernels (decode_pipe.cu) at the default or a given minimum
// of positions per split, the single-buffered ones (decode_mma.cu) or the
// staged legacy kernels and their combine launch; pipelined ones also by
// variant (Backend.DecodePipeVariant) and fixed grid splits.
type decodeMode struct {
	name           string
	legacy, noPipe bool
	chunk, splits  int
	variant        string
}

// decodeModes: the pipelined kernels (also with 16 positions a split, so
// that short contexts take many splits, some empty, merged by the last
// block; with the grid's splits fixed at 1 and 3; and every other
// compiled variant), the single-buffered tensor-core ones and the legacy
// ones.
var decodeModes = append(append([]decodeMode{{name: "pipe"}, {name: "pipe chunk 16", chunk: 16}, {name: "pipe chunk 128", chunk: 128},
	{name: "pipe splits 1", splits: 1}, {name: "pipe splits 3", splits: 3}}, variantModes(0)...),
	decodeMode{name: "mma", noPipe: true}, decodeMode{name: "legacy", legacy: true})

// pipeModes are the pipelined modes of decodeModes and every variant at 16
// positions a split too (many splits, some empty).
var pipeModes = append(append([]decodeMode(nil), decodeModes[:len(decodeModes)-2]...), variantModes(16)...)

// variantModes is a mode for each compiled variant but the default, at
// chunk positions a split at least (0: the default).
func variantModes(chunk int) []decodeMode {
	var m []decodeMode
	for _, v := range PipeVariantNames()[1:] {
		name := "pipe " + v
		if chunk > 0 {
			name += fmt.Sprintf(" chunk %d", chunk)
		}
		m = append(m, decodeMode{name: name, variant: v, chunk: chunk})
	}
	return m
}

// set switches gb to m (ForceMMADecode: G = 8 too on the tensor cores) and
// returns the function that switches it back.
func (m decodeMode) set() func() {
	gb.LegacyDecodeAttention, gb.NoDecodePipe, gb.DecodePipeChunk, gb.ForceMMADecode = m.legacy, m.noPipe, m.chunk, !m.legacy
	gb.DecodePipeSplits, gb.DecodePipeVariant = m.splits, m.variant
	return func() {
		gb.LegacyDecodeAttention, gb.NoDecodePipe, gb.DecodePipeChunk, gb.ForceMMADecode = legacyDecodeFromEnv(), false, 0, false
		gb.DecodePipeSplits, gb.DecodePipeVariant = 0, ""
	}
}

// contigDecode fills a poisoned cache of capacity C with n = pos0+1 random
// rows and returns the caches, the host copies of the rows and a query.
func contigDecode(t *testing.T, rng *rand.Rand, n, C, H, K, d int) (gkc, gvc *runtime.Tensor, kc, vc, q []float32) {
	t.Helper()
	q = randBF16(rng, H*d, 2)
	row := K * d
	kc, vc = randBF16(rng, n*row, 2), randBF16(rng, n*row, 2)
	gkc, gvc = poisoned(t, runtime.BF16, C, K, d), poisoned(t, runtime.BF16, C, K, d)
	fk, _ := gkc.Slice(0, n)
	fv, _ := gvc.Slice(0, n)
	if err := gb.WriteBytes(fk, bf16Bytes(kc)); err != nil {
		t.Fatal(err)
	}
	if err := gb.WriteBytes(fv, bf16Bytes(vc)); err != nil {
		t.Fatal(err)
	}
	return gkc, gvc, kc, vc, q
}

// contigRef is the CPU reference of one query at position pos0 over the
// first rows of kc, vc (cache capacity C).
func contigRef(t *testing.T, q, kc, vc []float32, pos0, C, H, K, d, window int) []float32 {
	t.Helper()
	row := K * d
	full := func(v []float32) []float32 {
		return append(append([]float32(nil), v[:min(len(v), (pos0+1)*row)]...), make([]float32, (C-min(len(v)/row, pos0+1))*row)...)
	}
	ref := host(t, runtime.F32, nil, 1, H, d)
	if err := cb.AttentionWindow(ref, host(t, runtime.F32, q, 1, H, d), host(t, runtime.F32, full(kc), C, K, d),
		host(t, runtime.F32, full(vc), C, K, d), pos0, window); err != nil {
		t.Fatal(err)
	}
	return ref.F32()
}

// TestDecodeMMA: one-token decode attention over a contiguous cache (rows
// past the position NaN) through the pipelined and single-buffered
// tensor-core kernels and the legacy kernels, against the CPU reference: at
// contexts 1, 63, 64, 65, 511, 534, 4097, 8192, 32,006 and 40,000 (one
// split, many, partly empty ones), head widths 64 and 128, 1, 2, 4 and 8 query heads per
// KV head, with sliding windows. Each case runs three times so that a
// counter left non-zero by the last-block merge would show.
func TestDecodeMMA(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	for _, c := range []struct {
		pos0, C, H, K, d, window int
	}{
		{0, 16, 32, 8, 128, 0},
		{62, 4096, 32, 8, 128, 0},
		{63, 4096, 16, 2, 64, 0},
		{64, 4096, 32, 32, 128, 0},
		{510, 33000, 32, 4, 128, 0},
		{533, 8704, 32, 8, 128, 0},
		{4096, 8192, 32, 8, 128, 0},
		{4096, 8192, 8, 8, 64, 1000},
		{8191, 8704, 32, 8, 128, 0},
		{32005, 32768, 32, 8, 128, 0},
		{32005, 32768, 16, 2, 64, 4096},
		{32005, 32768, 32, 4, 128, 20000},
		{100, 128, 32, 8, 128, 0}, // capacity 128: at most two splits
		{2000, 2048, 8, 1, 64, 0},
		{77, 300, 8, 8, 64, 0},
		{1999, 2048, 16, 2, 128, 100},
		{5000, 6000, 28, 4, 128, 0},
		// Context 40,000 (Llama 3's shape and 2, 8 query heads a KV head).
		{39999, 40960, 32, 8, 128, 0},
		{39999, 40960, 16, 8, 128, 0},
		{39999, 40960, 64, 8, 128, 5000},
	} {
		// The caches and the reference once per case, read by every mode.
		gkc, gvc, kc, vc, q := contigDecode(t, rng, c.pos0+1, c.C, c.H, c.K, c.d)
		ref := contigRef(t, q, kc, vc, c.pos0, c.C, c.H, c.K, c.d, c.window)
		for _, mode := range decodeModes {
			t.Run(fmt.Sprintf("pos %d cap %d H%d K%d d%d window %d %s", c.pos0, c.C, c.H, c.K, c.d, c.window, mode.name), func(t *testing.T) {
				defer mode.set()()
				gq := gpu(t, runtime.BF16, q, 1, c.H, c.d)
				for rep := range 3 {
					out := poisoned(t, runtime.BF16, 1, c.H, c.d)
					if err := gb.AttentionWindow(out, gq, gkc, gvc, c.pos0, c.window); err != nil {
						t.Fatal(err)
					}
					compare(t, fmt.Sprintf("decode attention, run %d", rep), read(t, out), ref, 1e-2, 2e-2)
				}
			})
		}
	}
}

// TestDecodePipePositions: one cache of capacity 8192 (the grid's split
// count fixed by it, as in a captured step graph) read at positions that
// make the pipelined kernel take 1, a few and all of its splits, one after
// another with no reset in between: a counter left non-zero by a merge over
// fewer splits than the grid's would break the next position.
func TestDecodePipePositions(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	const C, H, K, d = 8192, 32, 8, 128
	n := C
	gkc, gvc, kc, vc, q := contigDecode(t, rng, n, C, H, K, d)
	gq := gpu(t, runtime.BF16, q, 1, H, d)
	positions := []int{0, 8191, 130, 63, 4000, 127, 128, 2047, 1}
	refs := make([][]float32, len(positions))
	for i, pos := range positions {
		refs[i] = contigRef(t, q, kc, vc, pos, C, H, K, d, 0)
	}
	for _, mode := range pipeModes {
		t.Run(mode.name, func(t *testing.T) {
			defer mode.set()()
			for i, pos := range positions {
				out := poisoned(t, runtime.BF16, 1, H, d)
				if err := gb.AttentionWindow(out, gq, gkc, gvc, pos, 0); err != nil {
					t.Fatal(err)
				}
				compare(t, fmt.Sprintf("%s: decode attention at position %d", mode.name, pos), read(t, out), refs[i], 1e-2, 2e-2)
			}
		})
	}
}

// TestPagedDecodeMMA: batched decode over a paged pool with shuffled block
// tables (rows outside them NaN) through the pipelined and single-buffered
// tensor-core kernels and the legacy kernels, against the CPU reference: a
// few long sequences (many splits, merged by the last block), 64 sequences
// of about 520 positions (the batch-64 benchmark's shape), 300 short ones
// (one split, written directly), sequences of unequal lengths 1, 63, 64,
// 65, 511, 4097 and 32,001 at 1, 4 and 8 query heads per KV head, head
// widths 64 and 128, with and without a window; each twice so that
// counters left non-zero would show.
func TestPagedDecodeMMA(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	mixed := func(n, lo, hi int) []pagedSeq {
		s := make([]pagedSeq, n)
		for i := range s {
			s[i] = pagedSeq{1, lo + rng.IntN(hi-lo+1)}
		}
		return s
	}
	for _, c := range []struct {
		name                string
		H, K, d, bs, window int
		seqs                []pagedSeq
	}{
		{"3 long d128", 32, 8, 128, 16, 0, []pagedSeq{{1, 3000}, {1, 1}, {1, 4097}}},
		{"64 at 520 d128", 32, 8, 128, 16, 0, mixed(64, 500, 540)},
		{"300 short d128 G8", 64, 8, 128, 16, 0, mixed(300, 1, 90)},
		{"17 mixed d64 G1 bs 32", 8, 8, 64, 32, 0, mixed(17, 1, 700)},
		{"9 mixed d128 window 50", 32, 8, 128, 16, 50, mixed(9, 1, 400)},
		{"5 mixed d64 G2 bs 8", 4, 2, 64, 8, 0, mixed(5, 1, 1000)},
		{"edges d128 G4", 32, 8, 128, 16, 0, []pagedSeq{{1, 32001}, {1, 1}, {1, 63}, {1, 64}, {1, 65}, {1, 511}, {1, 4097}}},
		{"edges d64 G8 window 300", 16, 2, 64, 16, 300, []pagedSeq{{1, 1}, {1, 63}, {1, 64}, {1, 65}, {1, 511}, {1, 4097}, {1, 32001}}},
		{"edges d128 G1 bs 64", 8, 8, 128, 64, 0, []pagedSeq{{1, 65}, {1, 4097}, {1, 63}, {1, 511}}},
		{"128 mixed d128 G8 bs 16", 32, 4, 128, 16, 0, mixed(128, 1, 2000)},
	} {
		for _, mode := range decodeModes {
			t.Run(fmt.Sprintf("%s %s", c.name, mode.name), func(t *testing.T) {
				kv, qStarts, kp, vp, P := pagedLayout(rng, c.seqs, c.K, c.d, c.bs)
				T := len(c.seqs)
				q := randBF16(rng, T*c.H*c.d, 2)
				ref := host(t, runtime.F32, nil, T, c.H, c.d)
				if err := cb.VarlenPrefillAttention(ref, host(t, runtime.F32, q, T, c.H, c.d), host(t, runtime.F32, kp, P, c.K, c.d),
					host(t, runtime.F32, vp, P, c.K, c.d), qStarts, kv, c.window); err != nil {
					t.Fatal(err)
				}
				defer mode.set()()
				gq := gpu(t, runtime.BF16, q, T, c.H, c.d)
				gk, gv := gpu(t, runtime.BF16, kp, P, c.K, c.d), gpu(t, runtime.BF16, vp, P, c.K, c.d)
				for rep := range 2 {
					out := poisoned(t, runtime.BF16, T, c.H, c.d)
					if err := gb.PagedDecodeAttention(out, gq, gk, gv, kv, c.window); err != nil {
						t.Fatal(err)
					}
					compare(t, fmt.Sprintf("PagedDecodeAttention, run %d", rep), read(t, out), ref.F32(), 1e-2, 2e-2)
				}
			})
		}
	}
}

// TestDecodePipeCapturedStep: every pipelined variant in a captured graph of
// RoPEStoreKV and Attention (with dependent launch where the GPU has it:
// the FAST variants prefetch into L2 before their wait while the store
// kernel before them may still write the newest row), replayed at
// positions that take one, some and all of the grid's splits, against the
// CPU reference over the query and caches the replay left behind.
func TestDecodePipeCapturedStep(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	const C, H, K, d = 4096, 32, 8, 128
	inv := ropeTables(t, d)["default"]
	modes := []decodeMode{{name: "pipe"}}
	for _, v := range PipeVariantNames()[1:] {
		modes = append(modes, decodeMode{name: "pipe " + v, variant: v})
	}
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			defer mode.set()()
			gkc, gvc, _, _, q := contigDecode(t, rng, C, C, H, K, d)
			gq := gpu(t, runtime.BF16, q, 1, H, d)
			gk := gpu(t, runtime.BF16, randBF16(rng, K*d, 2), 1, K, d)
			gv := gpu(t, runtime.BF16, randBF16(rng, K*d, 2), 1, K, d)
			out := poisoned(t, runtime.BF16, 1, H, d)
			graph, err := gb.CaptureStep(func() error {
				if err := gb.RoPEStoreKV(gq, gk, gv, gkc, gvc, 3, inv); err != nil {
					return err
				}
				return gb.Attention(out, gq, gkc, gvc, 3)
			})
			if err != nil {
				t.Fatal(err)
			}
			defer graph.Close()
			for _, pos := range []int{100, 4095, 7, 2047, 129, 0} {
				if err := gb.SetStep([]int32{0}, pos); err != nil {
					t.Fatal(err)
				}
				if err := graph.Replay(); err != nil {
					t.Fatal(err)
				}
				ref := host(t, runtime.F32, nil, 1, H, d)
				if err := cb.AttentionWindow(ref, host(t, runtime.F32, read(t, gq), 1, H, d), host(t, runtime.F32, read(t, gkc), C, K, d),
					host(t, runtime.F32, read(t, gvc), C, K, d), pos, 0); err != nil {
					t.Fatal(err)
				}
				compare(t, fmt.Sprintf("replay at %d", pos), read(t, out), ref.F32(), 1e-2, 2e-2)
			}
		})
	}
}

// TestContigPipeFor: short caches take contigPipeShort, longer ones
// contigPipeDefault, both compiled variants, and pipeFor resolves each
// capacity's default to that variant.
func TestContigPipeFor(t *testing.T) {
	needGPU(t)
	saved := gb.DecodePipeVariant
	gb.DecodePipeVariant = ""
	defer func() { gb.DecodePipeVariant = saved }()
	for _, c := range []struct {
		capacity int
		want     string
	}{{1, contigPipeShort}, {535, contigPipeShort}, {contigShortCap, contigPipeShort},
		{contigShortCap + 1, contigPipeDefault}, {40960, contigPipeDefault}} {
		if got := contigPipeFor(c.capacity); got != c.want {
			t.Errorf("contigPipeFor(%d) = %s, want %s", c.capacity, got, c.want)
		}
		v, pk, err := gb.pipeFor(128, 8, true, c.capacity)
		if err != nil || pk == nil || v.Name() != c.want {
			t.Errorf("pipeFor(128, 8, contiguous, %d) = %s, %v, %v; want %s", c.capacity, v.Name(), pk != nil, err, c.want)
		}
	}
	if v, _, err := gb.pipeFor(128, 8, false, 535); err != nil || v.Name() != PipeVariantNames()[0] {
		t.Errorf("pipeFor(128, 8, paged) = %s, %v; want %s", v.Name(), err, PipeVariantNames()[0])
	}
}
