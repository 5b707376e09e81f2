//go:build cuda

package cudabackend

import (
	"fmt"
	"math"
	"os"

	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// Tensor-core decode attention (kernels/cuda/decode_mma.cu): one query per
// sequence (or per graph step) over a contiguous or a paged cache, head
// widths 64 and 128, at most 8 query heads per KV head, the split partials
// merged by the last block to finish instead of a combine launch.
//
// Switches: Backend.LegacyDecodeAttention (FT_DECODE_ATTN=legacy in the
// environment when the backend is made) runs the staged decode kernels and
// attn_combine_bf16 instead, for A/B runs. The tensor-core kernels are the
// pipelined ones of decode_pipe.cu (a cp.async ring of keys and values per
// warp, the split count chosen on the device from the visible span, a wide
// merge); Backend.NoDecodePipe (FT_DECODE_PIPE=0) takes the
// single-buffered ones of decode_mma.cu instead.

// decodeMMAKernels are the tensor-core decode kernels by head width.
type decodeMMAKernels struct {
	contig, paged map[int]*cuda.Function
	// wave is how many blocks of 128 threads of the d128 kernel the whole
	// GPU holds at once.
	wave int
	// pipeContig and pipePaged are the pipelined kernels (decode_pipe.cu);
	// pipeWave is how many blocks of each (by head width, with its dynamic
	// shared memory) the whole GPU holds at once.
	pipeContig, pipePaged map[int]*cuda.Function
	pipeWave              map[int]int
}

// loadDecodeMMA looks the kernels up in the compiled module.
func loadDecodeMMA(get func(string) *cuda.Function) decodeMMAKernels {
	return decodeMMAKernels{
		contig:     map[int]*cuda.Function{64: get("attn_decode_mma_d64_bf16"), 128: get("attn_decode_mma_d128_bf16")},
		paged:      map[int]*cuda.Function{64: get("attn_paged_decode_mma_d64_bf16"), 128: get("attn_paged_decode_mma_d128_bf16")},
		pipeContig: map[int]*cuda.Function{64: get("attn_decode_pipe_d64_bf16"), 128: get("attn_decode_pipe_d128_bf16")},
		pipePaged:  map[int]*cuda.Function{64: get("attn_paged_decode_pipe_d64_bf16"), 128: get("attn_paged_decode_pipe_d128_bf16")},
	}
}

// pipeStages is the number of cp.async ring stages of the pipelined
// kernels by head width: decode_pipe.cu's template argument S.
var pipeStages = map[int]int{64: 4, 128: 3}

// pipeSmem is the dynamic shared memory of the pipelined kernel of head
// width d: 4 warps × S stages × SLOTS 16-byte pieces × 32 lanes, SLOTS =
// 2·d/32 (keys) + 4·d/64 (values), as decode_pipe_body lays out its ring.
func pipeSmem(d int) int { return 4 * pipeStages[d] * (2*(d/32) + 4*(d/64)) * 32 * 16 }

// pipeMaxSplit is FT_PIPE_MAXSPLIT of decode_pipe.cu: the most splits its
// merge holds.
const pipeMaxSplit = 64

// sizeWave sets wave from the d128 kernel's occupancy, lets the pipelined
// kernels take their dynamic shared memory and sets pipeWave.
func (k *decodeMMAKernels) sizeWave(sms int) error {
	n, err := k.paged[128].MaxActiveBlocksPerSM(128, 0)
	if err != nil {
		return err
	}
	k.wave = max(1, n) * sms
	k.pipeWave = map[int]int{}
	for d, f := range k.pipePaged {
		smem := pipeSmem(d)
		for _, g := range []*cuda.Function{f, k.pipeContig[d]} {
			if err := g.SetMaxDynamicSharedMemory(smem); err != nil {
				return err
			}
		}
		n, err := f.MaxActiveBlocksPerSM(128, smem)
		if err != nil {
			return err
		}
		k.pipeWave[d] = max(1, n) * sms
	}
	return nil
}

// legacyDecodeFromEnv is the default of Backend.LegacyDecodeAttention.
func legacyDecodeFromEnv() bool { return os.Getenv("FT_DECODE_ATTN") == "legacy" }

// decodeMMA returns the tensor-core decode kernel for head width d with G
// query heads per KV head, or nil where it does not apply (the switch is
// off, tests ask for the generic kernel, the shape or alignment does not
// fit).
func (b *Backend) decodeMMA(paged bool, d, G int, ptrs ...uintptr) *cuda.Function {
	if b.LegacyDecodeAttention || b.noFlash || G > 8 || !aligned16(ptrs...) {
		return nil
	}
	// One sequence with 8 query heads per KV head (Qwen3-30B-A3B's 32/4):
	// the staged kernel + combine measured 0.47 ms a step against 0.55 ms
	// (24 layers, context 512, H200, bench/RESULTS.md); with 4 (Llama 3's
	// 32/8) the tensor-core one is as fast at 512 and faster at 8,000.
	if !paged && G >= 8 && !b.ForceMMADecode {
		return nil
	}
	if paged {
		return b.k.decodeMMA.paged[d]
	}
	return b.k.decodeMMA.contig[d]
}

// mmaSplitsContig is the split count of a one-token decode over a cache of
// capacity positions: one block per 64 positions at most, and no more
// blocks than one wave of the GPU holds. It depends on the capacity (not
// the position), so a captured step graph holds at every position.
func (b *Backend) mmaSplitsContig(capacity, K int) int {
	return max(1, min(splitsFor(capacity), b.k.decodeMMA.wave/K))
}

// mmaSplitsPaged is the split count of a batched decode of R query rows
// whose longest visible span is span: at least two waves of blocks where
// the rows alone do not make them, at most one split per 64 positions.
func (b *Backend) mmaSplitsPaged(span, R, K int) int {
	pairs := R * K
	return max(1, min(splitsFor(span), (2*b.k.decodeMMA.wave+pairs-1)/pairs))
}

// ensureCounters returns n zeroed int32 counters for the last-block merge
// (the kernels leave them zero). They are zeroed through the aux stream,
// synchronously, so this is legal while the compute stream captures.
func (b *Backend) ensureCounters(n int) (uintptr, error) {
	need := int64(4 * n)
	if b.counters != nil && b.counters.Size() >= need {
		return b.counters.Ptr(), nil
	}
	if b.counters != nil {
		b.retired = append(b.retired, b.counters)
		b.counters = nil
	}
	size := max(need, 4096)
	buf, err := b.dev.Alloc(size, "decode attention counters")
	if err != nil {
		return 0, err
	}
	if err := b.aux.Upload(buf.Ptr(), make([]byte, size)); err != nil {
		buf.Free()
		return 0, err
	}
	b.counters = buf
	return buf.Ptr(), nil
}

// mmaPartials returns the partials (po, pml) of nsplit splits of R query
// rows of H heads of width d (none for one split) and the counters of the
// R·K (query, KV head) pairs.
func (b *Backend) mmaPartials(R, nsplit, H, K, d int) (po, pml, cnt uintptr, err error) {
	if nsplit > 1 {
		poBytes := int64(R) * int64(nsplit) * int64(H) * int64(d) * 4
		if err := b.ensurePart(poBytes + int64(R)*int64(nsplit)*int64(H)*8); err != nil {
			return 0, 0, 0, err
		}
		po, pml = b.part.Ptr(), b.part.Ptr()+uintptr(poBytes)
	}
	if cnt, err = b.ensureCounters(R * K); err != nil {
		return 0, 0, 0, err
	}
	return po, pml, cnt, nil
}

// pipeChunk is the fewest visible positions a split of the pipelined
// kernels takes (Backend.DecodePipeChunk, default 128).
func (b *Backend) pipeChunk() int {
	if b.DecodePipeChunk > 0 {
		return b.DecodePipeChunk
	}
	return 128
}

// pipeSplits is the grid's split count of the pipelined kernels for R
// query rows (pairs = R·K blocks a split) whose longest visible span is
// limit: about one wave of blocks where the pairs alone do not make two,
// at most one split per 64 positions of limit and pipeMaxSplit. The
// kernel takes fewer where a row's own span is short (pipeChunk positions
// a split at least), so for one sequence limit is the capacity: the
// captured step graph then holds at every position.
func (b *Backend) pipeSplits(limit, pairs, d int) int {
	wave := b.k.decodeMMA.pipeWave[d]
	n := (wave + pairs - 1) / pairs
	if pairs >= wave {
		n = (2*wave + pairs - 1) / pairs // at most 2: a split of each row when that evens the waves out
	}
	return max(1, min(splitsFor(limit), n, pipeMaxSplit))
}

// attentionPipe is the one-token (or T-token, each at pos0+t) decode over
// a contiguous cache [C,K,d] through attn_decode_pipe_*: one launch.
func (b *Backend) attentionPipe(f *cuda.Function, outP, qP, kP, vP uintptr, T, H, K, d, C, pos0, window int, kvBytes int64) error {
	nsplit := 1
	if T == 1 {
		nsplit = b.pipeSplits(C, K, d)
	}
	po, pml, cnt, err := b.mmaPartials(T, nsplit, H, K, d)
	if err != nil {
		return err
	}
	scale := float32(math.Log2E / math.Sqrt(float64(d)))
	posp, p0 := b.posArgs(pos0)
	return f.LaunchBytes(b.s, kvBytes, cuda.Dim3{X: K, Y: nsplit, Z: T}, cuda.Dim3{X: 128}, pipeSmem(d),
		cuda.Ptr(outP), cuda.Ptr(po), cuda.Ptr(pml), cuda.Ptr(cnt), cuda.Ptr(qP), cuda.Ptr(kP), cuda.Ptr(vP),
		cuda.I32(H), cuda.I32(K), cuda.I32(nsplit), cuda.I32(b.pipeChunk()), posp, p0, cuda.F32(scale), cuda.I32(window))
}

// attentionMMA is the one-token (or T-token, each at pos0+t) decode over a
// contiguous cache [C,K,d] through attn_decode_pipe_* (attn_decode_mma_*
// with NoDecodePipe): one launch.
func (b *Backend) attentionMMA(f *cuda.Function, outP, qP, kP, vP uintptr, T, H, K, d, C, pos0, window int, kvBytes int64) error {
	if T > 65535 {
		return fmt.Errorf("cudabackend.Attention: %d query rows through the decode kernel, at most 65535", T)
	}
	if pf := b.k.decodeMMA.pipeContig[d]; pf != nil && !b.NoDecodePipe {
		return b.attentionPipe(pf, outP, qP, kP, vP, T, H, K, d, C, pos0, window, kvBytes)
	}
	nsplit := 1
	if T == 1 {
		nsplit = b.mmaSplitsContig(C, K)
	}
	po, pml, cnt, err := b.mmaPartials(T, nsplit, H, K, d)
	if err != nil {
		return err
	}
	scale := float32(math.Log2E / math.Sqrt(float64(d)))
	posp, p0 := b.posArgs(pos0)
	return f.LaunchBytes(b.s, kvBytes, cuda.Dim3{X: K, Y: nsplit, Z: T}, cuda.Dim3{X: 128}, 0,
		cuda.Ptr(outP), cuda.Ptr(po), cuda.Ptr(pml), cuda.Ptr(cnt), cuda.Ptr(qP), cuda.Ptr(kP), cuda.Ptr(vP),
		cuda.I32(H), cuda.I32(K), cuda.I32(nsplit), posp, p0, cuda.F32(scale), cuda.I32(window))
}

// pagedMMA is the batched decode of R query rows (rowsP: sequence and
// position pairs; tableP: the block table) through
// attn_paged_decode_pipe_* (attn_paged_decode_mma_* with NoDecodePipe):
// one launch.
func (b *Backend) pagedMMA(f *cuda.Function, outP, qP, kP, vP, rowsP, tableP uintptr, R, H, K, d, span, maxBlocks, bs, window int, kvBytes int64) error {
	if pf := b.k.decodeMMA.pipePaged[d]; pf != nil && !b.NoDecodePipe {
		nsplit := b.pipeSplits(span, R*K, d)
		po, pml, cnt, err := b.mmaPartials(R, nsplit, H, K, d)
		if err != nil {
			return err
		}
		scale := float32(math.Log2E / math.Sqrt(float64(d)))
		return pf.LaunchBytes(b.s, kvBytes, cuda.Dim3{X: K, Y: nsplit, Z: R}, cuda.Dim3{X: 128}, pipeSmem(d),
			cuda.Ptr(outP), cuda.Ptr(po), cuda.Ptr(pml), cuda.Ptr(cnt), cuda.Ptr(qP), cuda.Ptr(kP), cuda.Ptr(vP),
			cuda.I32(H), cuda.I32(K), cuda.I32(nsplit), cuda.I32(b.pipeChunk()), cuda.Ptr(rowsP), cuda.Ptr(tableP),
			cuda.I32(maxBlocks), cuda.I32(bs), cuda.F32(scale), cuda.I32(window))
	}
	nsplit := b.mmaSplitsPaged(span, R, K)
	po, pml, cnt, err := b.mmaPartials(R, nsplit, H, K, d)
	if err != nil {
		return err
	}
	scale := float32(math.Log2E / math.Sqrt(float64(d)))
	return f.LaunchBytes(b.s, kvBytes, cuda.Dim3{X: K, Y: nsplit, Z: R}, cuda.Dim3{X: 128}, 0,
		cuda.Ptr(outP), cuda.Ptr(po), cuda.Ptr(pml), cuda.Ptr(cnt), cuda.Ptr(qP), cuda.Ptr(kP), cuda.Ptr(vP),
		cuda.I32(H), cuda.I32(K), cuda.I32(nsplit), cuda.Ptr(rowsP), cuda.Ptr(tableP), cuda.I32(maxBlocks), cuda.I32(bs),
		cuda.F32(scale), cuda.I32(window))
}
