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
// Tuning (A/B runs, bench/h200-decsweep.sh): Backend.DecodePipeVariant
// (FT_DECODE_VARIANT) picks a compiled variant of the pipelined kernels
// (pipeVariants) and Backend.DecodePipeSplits (FT_DECODE_SPLITS) fixes the
// grid's splits per (row, head block).
//
// Switches: Backend.LegacyDecodeAttention (FT_DECODE_ATTN=legacy in the
// environment when the backend is made) runs the staged decode kernels and
// attn_combine_bf16 instead, for A/B runs. The tensor-core kernels are the
// pipelined ones of decode_pipe.cu (a cp.async ring of keys and values per
// warp, the split count chosen on the device from the visible span, a wide
// merge), except for paged batches of pagedPipeMaxRows rows or more;
// Backend.NoDecodePipe (FT_DECODE_PIPE=0) takes the single-buffered ones of
// decode_mma.cu everywhere.

// decodeMMAKernels are the tensor-core decode kernels by head width.
type decodeMMAKernels struct {
	contig, paged map[int]*cuda.Function
	// wave is how many blocks of 128 threads of the d128 kernel the whole
	// GPU holds at once.
	wave int
	// pipe are the pipelined kernels (decode_pipe.cu) by variant.
	pipe map[pipeVariant]*pipeKernels
	// cluster are contigPipeShort's cluster twins (cluster.go).
	cluster map[clusterKey]*cuda.Function
}

// pipeKernels are the two kernels of one pipelined variant and how many
// of its blocks (with the ring's shared memory) the whole GPU holds.
type pipeKernels struct {
	contig, paged *cuda.Function
	wave          int
	// maxSmem is the dynamic shared memory both kernels accept: the
	// block's limit less their static shared memory (the merge's).
	maxSmem int
}

// pipeVariant is one compiled tuning of decode_pipe.cu's decode_pipe_body:
// head width D, ring stages S, warps per block W, KV heads per block H,
// whole-row key copies (Rows) and the FAST path (Fast: L2 prefetch before
// the dependent-launch wait, the query after the first copies, a merge in
// one round trip) or Tr: the transposed products of decode_tr.cu (keys as
// the 16 rows of the MMA, Sᵀ = K·Qᵀ and Oᵀ = Vᵀ·Pᵀ, one KV head a block;
// Rows does not apply). Pre (transposed only): the ring's first stages
// that hold no position this step writes are copied before the
// dependent-launch wait, over a contiguous cache (decode_tr.cu's PRE).
type pipeVariant struct {
	D, S, W, H          int
	Rows, Fast, Tr, Pre bool
}

// Name is the variant's part of its kernel names and its FT_DECODE_VARIANT
// value: s3w4h1r is 3 stages, 4 warps, 1 KV head a block, whole-row key
// copies ("o": each lane copies the key pieces it reads; "t": the
// transposed kernel of decode_tr.cu); a trailing "f" is the FAST path
// (s3w4h1rf, s3w4h1tf), a trailing "p" the early copies (s3w4h1tp).
func (v pipeVariant) Name() string {
	c := "o"
	if v.Rows {
		c = "r"
	}
	if v.Tr {
		c = "t"
	}
	if v.Fast {
		c += "f"
	}
	if v.Pre {
		c += "p"
	}
	return fmt.Sprintf("s%dw%dh%d%s", v.S, v.W, v.H, c)
}

// kernel is the name of the variant's contiguous ("") or paged ("paged_")
// kernel.
func (v pipeVariant) kernel(prefix string) string {
	return fmt.Sprintf("attn_%sdecode_pipe_d%d_%s_bf16", prefix, v.D, v.Name())
}

// ring is the variant's cp.async ring in bytes: W warps × S stages × SLOTS
// 16-byte pieces × 32 lanes, SLOTS = 2·D/32 (keys) + 4·D/64 (values).
func (v pipeVariant) ring() int { return v.W * v.S * (2*(v.D/32) + 4*(v.D/64)) * 32 * 16 }

// smem is the dynamic shared memory of a launch with nsplit splits and G
// query heads per KV head: the ring or, where larger, the scratch after
// the loop as decode_pipe_body lays it out (so[W][8][D], fs[nsplit·GK],
// alignment, finv[GK rounded to 4], red[max(GK·D/4, W·32)] float4).
func (v pipeVariant) smem(nsplit, G int) int {
	gk := v.H * G
	floats := v.W*8*v.D + nsplit*gk + 3 + (gk+3)&^3 + 4*max(gk*v.D/4, v.W*32)
	return max(v.ring(), 4*floats)
}

// pipeVariants are the compiled variants (decode_pipe.cu's FT_PIPE_VARIANT
// lines); the first of each head width is its default.
var pipeVariants = []pipeVariant{
	{64, 4, 4, 1, false, false, false, false},
	{128, 3, 4, 1, true, false, false, false},
	{128, 3, 4, 1, false, false, false, false},
	{128, 2, 4, 1, false, false, false, false},
	{128, 2, 4, 1, true, false, false, false},
	{128, 4, 4, 1, true, false, false, false},
	{128, 3, 8, 1, true, false, false, false},
	{128, 2, 4, 4, true, false, false, false},
	{128, 3, 4, 4, true, false, false, false},
	{128, 2, 8, 8, true, false, false, false},
	{128, 3, 8, 8, true, false, false, false},
	// The FAST path (issues 15, 21): the default's shape, then smaller
	// blocks (2 and 1 warps: the batch's (row, KV head) items spread over
	// every SM in one wave, no block-wide merge of warps for W = 1).
	{128, 3, 4, 1, true, true, false, false},
	{128, 3, 2, 1, true, true, false, false},
	{128, 4, 2, 1, true, true, false, false},
	{128, 4, 1, 1, true, true, false, false},
	{128, 6, 1, 1, true, true, false, false},
	// The transposed products (decode_tr.cu, issues 15, 21): one KV head a
	// block, fewer instructions and registers a key group; s3w4h1t's PRE
	// twin s3w4h1tp (below) is the default over a contiguous cache
	// (contigPipeDefault).
	{128, 3, 4, 1, false, false, true, false},
	{128, 2, 4, 1, false, false, true, false},
	{128, 4, 2, 1, false, false, true, false},
	{128, 3, 2, 1, false, false, true, false},
	{128, 3, 4, 1, false, true, true, false},
	{128, 4, 2, 1, false, true, true, false},
	// The transposed kernel with its first copies before the wait
	// (decode_tr.cu's PRE; issue 21, s15).
	{128, 3, 4, 1, false, false, true, true},
	{128, 2, 4, 1, false, false, true, true},
	// Deeper rings (every group of a short split copied before the wait)
	// and 8 warps a block (session 28; A/B runs).
	{128, 5, 4, 1, false, false, true, true},
	{128, 4, 4, 1, false, false, true, true},
	{128, 3, 8, 1, false, false, true, true},
	{128, 2, 8, 1, false, false, true, true},
}

// PipeVariantNames are the FT_DECODE_VARIANT values (head width 128; head
// width 64 has only its default).
func PipeVariantNames() []string {
	var names []string
	for _, v := range pipeVariants {
		if v.D == 128 {
			names = append(names, v.Name())
		}
	}
	return names
}

// pagedPipeMaxRows is the fewest rows of a paged batch that take the
// single-buffered tensor-core kernel instead of the pipelined one (see
// pagedMMA).
const pagedPipeMaxRows = 128

// pipeMaxShared is the most dynamic shared memory one block may take.
const pipeMaxShared = 232448

// loadDecodeMMA looks the kernels up in the compiled module.
func loadDecodeMMA(get func(string) *cuda.Function) decodeMMAKernels {
	k := decodeMMAKernels{
		contig: map[int]*cuda.Function{64: get("attn_decode_mma_d64_bf16"), 128: get("attn_decode_mma_d128_bf16")},
		paged:  map[int]*cuda.Function{64: get("attn_paged_decode_mma_d64_bf16"), 128: get("attn_paged_decode_mma_d128_bf16")},
		pipe:   map[pipeVariant]*pipeKernels{},
	}
	for _, v := range pipeVariants {
		k.pipe[v] = &pipeKernels{contig: get(v.kernel("")), paged: get(v.kernel("paged_"))}
	}
	k.cluster = map[clusterKey]*cuda.Function{}
	for _, push := range []bool{false, true} {
		for _, cs := range clusterSplits {
			k.cluster[clusterKey{cs, push}] = get(clusterKernel(cs, push))
		}
	}
	return k
}

// pipeMaxSplit is FT_PIPE_MAXSPLIT of decode_pipe.cu: the most splits a
// (row, head block) pair uses.
const pipeMaxSplit = 256

// sizeWave sets wave from the d128 kernel's occupancy, lets the pipelined
// kernels take up to pipeMaxShared bytes of dynamic shared memory and
// sets each variant's wave from its ring.
func (k *decodeMMAKernels) sizeWave(sms int) error {
	n, err := k.paged[128].MaxActiveBlocksPerSM(128, 0)
	if err != nil {
		return err
	}
	k.wave = max(1, n) * sms
	for v, pk := range k.pipe {
		if pk.contig == nil || pk.paged == nil {
			continue
		}
		// The limit counts the kernel's static shared memory too, and
		// smaller GPUs allow less (sm_80 163 KiB a block, sm_86/89 99 KiB):
		// step down until the driver takes it. A variant whose ring does
		// not fit is dropped; pipeFor then finds no kernels for it, and the
		// decode takes the single-buffered kernel.
		pk.maxSmem = 0
		for s := pipeMaxShared; s >= v.ring() && pk.maxSmem == 0; s -= 1024 {
			if pk.contig.SetMaxDynamicSharedMemory(s) == nil && pk.paged.SetMaxDynamicSharedMemory(s) == nil {
				pk.maxSmem = s
			}
		}
		if pk.maxSmem == 0 {
			delete(k.pipe, v)
			continue
		}
		n, err := pk.paged.MaxActiveBlocksPerSM(32*v.W, v.ring())
		if err != nil {
			return err
		}
		pk.wave = max(1, n) * sms
	}
	k.sizeClusters()
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
// kernels takes (Backend.DecodePipeChunk, default pipeChunkDefault).
func (b *Backend) pipeChunk() int {
	if b.DecodePipeChunk > 0 {
		return b.DecodePipeChunk
	}
	return pipeChunkDefault
}

// pipeChunkDefault is the fewest positions a split takes without
// FT_DECODE_CHUNK. Measured on the H200 (2026-12-03, bench/h200-s15b.sh,
// resident Llama-3-8B shape): 256 against the earlier 128 gave run-model
// (256 tokens, contexts 12-267: one split instead of up to three, no merge
// round trip) 4.01 against 4.04 ms a token, the graph step at 2,048 4.26
// against 4.28 ms and at 8,192 4.52 against 4.57; Qwen3-8B run-model 4.23
// against 4.26 (with the early GEMVs). At 8,192 the split layout is the
// same for both (the grid's 33 splits bound it: 32 of 256 positions and
// one of the rest), so that gain is not explained by it. Again on
// 2026-12-04 (bench/h200-s27a.sh): run-model 4.02 (256), 4.03 (128), 4.05
// (64) ms a token; the graph step at 512 0.03-0.05 ms faster with 128 or 64
// (FP8 2.73 against 2.76, BF16 4.15-4.17 against 4.20). The block trace
// (s27c) puts the attention's time at 512 on its latency chain, the same at
// 128 and 256.
const pipeChunkDefault = 256

// contigPipeDefault is the variant of a one-sequence decode over a
// contiguous cache at head width 128 when FT_DECODE_VARIANT is unset: the
// transposed kernel. Measured on the H200 (2026-12-01, bench/h200-s5c.sh,
// Llama-3-8B shape, graph-replayed step): context 32,000 5.42 ms
// (attention 1.458 ms) against 6.02 ms (2.04 ms) with s3w4h1r; context
// 8,192 4.65 against 4.87 ms. Since s16 its PRE twin s3w4h1tp, which
// copies the older keys and values before the dependent-launch wait
// (decode_tr.cu): run-model 256 tokens after 12 ids (2026-12-03,
// bench/h200-s16a.sh) 3.99 twice against 4.03-4.04 three times for
// Llama-3-8B, 4.11 against 4.17-4.18 for Qwen3-8B. Paged batches keep the
// first variant of pipeVariants (s3w4h1r), which the batch figures were
// measured with.
const contigPipeDefault = "s3w4h1tp"

// contigPipeShort is the variant of a one-sequence decode over a
// contiguous cache of at most contigShortCap rows at head width 128 when
// FT_DECODE_VARIANT is unset: 8 warps a block with 2 stages each, so that
// a split of 256 positions is 2 groups a warp, the first copied before the
// dependent-launch wait. Measured on the H200 (2026-12-04,
// bench/h200-s28c.sh, Llama-3-8B FP8, resident graph step at context 512,
// two rounds): 2.51, 2.52 ms against 2.55, 2.55 with s3w4h1tp; s5w4h1tp
// 2.55, 2.53; s4w4h1tp 2.52, 2.53; s3w8h1tp 2.57, 2.58. bench/h200-s28d.sh:
// FP8 at 512 2.54, 2.55 against 2.60, 2.57; at 1,024 2.57 against 2.63; at
// 2,000 2.66 against 2.71; BF16 at 512 4.18 against 4.14, at 1,024 4.21
// against 4.20, at 2,000 4.25 both; run-model (BF16, 256 tokens) 4.01 ms a
// token both. s28e, BF16 at 512 twice: 4.11, 4.11 against 4.10, 4.10.
// One token on sm_90 takes its cluster twins (cluster.go) since s29.
const contigPipeShort = "s2w8h1tp"

// contigShortCap is the most cache rows that take contigPipeShort.
const contigShortCap = 2048

// contigPipeFor is the default variant over a contiguous cache of
// capacity rows (pipeFor takes contigPipeDefault where a GPU's shared
// memory cannot hold contigPipeShort's 128 KiB ring: sm_86/89's 99 KiB).
func contigPipeFor(capacity int) string {
	if capacity <= contigShortCap {
		return contigPipeShort
	}
	return contigPipeDefault
}

// pipeFor is the pipelined variant for head width d and K KV heads:
// Backend.DecodePipeVariant (FT_DECODE_VARIANT) by name at head width 128,
// else contigPipeFor(capacity) for a contiguous cache (contig) of capacity
// rows, else the head width's default (the first in pipeVariants). A variant of
// more KV heads a block than K divides falls back to one head a block
// with the same stages, warps and key copy where compiled, else to the
// default. pk is nil where no variant has head width d.
func (b *Backend) pipeFor(d, K int, contig bool, capacity int) (pipeVariant, *pipeKernels, error) {
	// pick is the variant of head width d named name, else its first.
	pick := func(name string) (v pipeVariant, found bool) {
		for _, c := range pipeVariants {
			if c.D == d && (!found || d == 128 && c.Name() == name) {
				v, found = c, true
			}
		}
		return v, found
	}
	want := b.DecodePipeVariant
	if want == "" && contig {
		want = contigPipeFor(capacity)
	}
	v, found := pick(want)
	if b.DecodePipeVariant == "" && v.Name() == contigPipeShort && b.k.decodeMMA.pipe[v] == nil {
		v, found = pick(contigPipeDefault) // dropped (sizeWave): its ring does not fit this GPU's shared memory
	}
	if !found {
		return v, nil, nil
	}
	if d == 128 && b.DecodePipeVariant != "" && v.Name() != b.DecodePipeVariant {
		return v, nil, fmt.Errorf("cudabackend: decode attention variant %q (FT_DECODE_VARIANT) is not compiled; have %v", b.DecodePipeVariant, PipeVariantNames())
	}
	if K%v.H != 0 {
		one := v
		one.H = 1
		if _, ok := b.k.decodeMMA.pipe[one]; ok {
			v = one
		} else {
			for _, c := range pipeVariants {
				if c.D == d {
					v = c
					break
				}
			}
		}
	}
	return v, b.k.decodeMMA.pipe[v], nil
}

// pipeSplits is the grid's split count of variant v for blocks (query
// rows × KV head blocks) blocks a split whose longest visible span is
// limit, G query heads per KV head: Backend.DecodePipeSplits
// (FT_DECODE_SPLITS) where set; one where the blocks alone fill a wave of
// the GPU (the batched decode: no partials, no merge; two splits each
// measured 2.41 against 2.11 ms for the single-buffered kernel at batch 64
// × 519 positions, Llama-3-8B, H200); else about one wave, at most one
// split per 64 positions of limit. At most pipeMaxSplit, and no more than
// the merge's scratch fits in a block's shared memory. The kernel takes
// fewer where a row's own span is short (pipeChunk positions a split at
// least), so for one sequence limit is the capacity: the captured step
// graph then holds at every position.
func (b *Backend) pipeSplits(v pipeVariant, pk *pipeKernels, limit, blocks, G int) int {
	var n int
	switch {
	case b.DecodePipeSplits > 0:
		n = b.DecodePipeSplits
	case blocks >= pk.wave:
		n = 1
	default:
		n = min((pk.wave+blocks-1)/blocks, (limit+63)/64)
	}
	n = max(1, min(n, pipeMaxSplit))
	for n > 1 && v.smem(n, G) > pk.maxSmem {
		n--
	}
	return n
}

// attentionPipe is the one-token (or T-token, each at pos0+t) decode over
// a contiguous cache [C,K,d] through variant v's attn_decode_pipe_* (one
// token over a short cache: its cluster twin where clusterFor has one):
// one launch.
func (b *Backend) attentionPipe(v pipeVariant, pk *pipeKernels, outP, qP, kP, vP uintptr, T, H, K, d, C, pos0, window int, kvBytes int64) error {
	if T == 1 {
		if f, cs, push := b.clusterFor(v, C, H/K); f != nil {
			err := b.attentionCluster(f, cs, push, v, outP, qP, kP, vP, H, K, d, pos0, window, kvBytes)
			if err == nil || b.capturing {
				return err
			}
			// A GPU (or a MIG slice) whose processing clusters cannot
			// hold the cluster refuses the launch: take the global merge
			// from now on.
			fmt.Fprintf(os.Stderr, "cudabackend: decode attention in clusters of %d blocks refused (%v); merging through global memory instead\n", cs, err)
			b.NoDecodeCluster = true
		}
	}
	nsplit := 1
	if T == 1 {
		nsplit = b.pipeSplits(v, pk, C, K/v.H, H/K)
	}
	po, pml, cnt, err := b.mmaPartials(T, nsplit, H, K, d)
	if err != nil {
		return err
	}
	scale := float32(math.Log2E / math.Sqrt(float64(d)))
	posp, p0 := b.posArgs(pos0)
	return pk.contig.LaunchBytes(b.s, kvBytes, cuda.Dim3{X: K / v.H, Y: nsplit, Z: T}, cuda.Dim3{X: 32 * v.W}, v.smem(nsplit, H/K),
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
	if !b.NoDecodePipe {
		v, pk, err := b.pipeFor(d, K, true, C)
		if err != nil {
			return err
		}
		if pk != nil {
			return b.attentionPipe(v, pk, outP, qP, kP, vP, T, H, K, d, C, pos0, window, kvBytes)
		}
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
	v, pk, err := b.pipeFor(d, K, false, 0)
	if err != nil && !b.NoDecodePipe {
		return err
	}
	// Many rows: the single-buffered kernel. Measured on the H200
	// (2026-12-01, bench/h200-sweep3.sh), Llama-3-8B at context 512: 256
	// rows took 13.06 ms a step with it against 15.12 pipelined, 64 rows
	// 7.98 against 7.86. DecodePipeSplits (a sweep) still forces the pipe.
	manyRows := R >= pagedPipeMaxRows && b.DecodePipeSplits == 0
	if pk != nil && !b.NoDecodePipe && !manyRows {
		nsplit := b.pipeSplits(v, pk, span, R*K/v.H, H/K)
		po, pml, cnt, err := b.mmaPartials(R, nsplit, H, K, d)
		if err != nil {
			return err
		}
		scale := float32(math.Log2E / math.Sqrt(float64(d)))
		return pk.paged.LaunchBytes(b.s, kvBytes, cuda.Dim3{X: K / v.H, Y: nsplit, Z: R}, cuda.Dim3{X: 32 * v.W}, v.smem(nsplit, H/K),
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
