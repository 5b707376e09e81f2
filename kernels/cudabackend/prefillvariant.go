package cudabackend

import (
	"fmt"
	"strings"
)

// Configurations of the tensor-core prefill attention (FT_PREFILL_VARIANT,
// Backend.PrefillVariant): prefill.cu's kernel ("base"), the layouts of
// prefill_variants.cu, which exist for head width 128 only, and
// prefill_fa2.cu's ("fa2", head widths 64 and 128). This file has no build
// tag so that the choice is tested without a GPU.

// prefillVariant is one configuration of the prefill kernel.
type prefillVariant struct {
	name      string // the FT_PREFILL_VARIANT value
	rows      int    // query rows per block (a query tile)
	threads   int    // threads per block
	qSmem     bool   // the query tile is staged in shared memory
	perSM     int    // blocks per SM the kernel is built for at head width 128 (__launch_bounds__)
	allWidths bool   // built for head widths 32, 64 and 128; else 128 only
	width64   bool   // also built for head width 64
	sm90a     bool   // in the sm_90a module (kernels/cuda/sm90a: wgmma), compute capability 9.0 only
	keys      int    // key positions per tile (sm90a variants)
	stages    int    // key/value stages in shared memory (sm90a variants)
	extra     string // sm90a variants: the file of kernels/cuda/sm90a/extra compiled in a module of its own ("": SourceSM90a's module)
	contig    bool   // also built over packed contiguous keys and values of sequences starting at position 0 (contigKernel)
}

// prefillVariants lists the configurations; the first is the default.
var prefillVariants = []prefillVariant{
	// 8 warps × 16 rows, queries in registers (prefill.cu).
	{name: "base", rows: 128, threads: 256, perSM: 1, allWidths: true},
	// 4 warps × 32 rows, queries in shared memory: each key/value fragment
	// feeds two m16 tiles.
	{name: "w4m32", rows: 128, threads: 128, qSmem: true, perSM: 2},
	// 8 warps × 16 rows, queries in shared memory, ≤ 128 registers.
	{name: "w8q", rows: 128, threads: 256, qSmem: true, perSM: 2},
	// 4 warps × 16 rows (64-row tiles), queries in registers.
	{name: "m64", rows: 64, threads: 128, perSM: 3},
	// w4m32's layout with FlashAttention-2's inner loop (prefill_fa2.cu):
	// constant-offset ldmatrix addressing, fragments loaded a step ahead,
	// queries in registers at head width 64, 16-byte output stores.
	{name: "fa2", rows: 128, threads: 128, qSmem: true, perSM: 2, width64: true},
	// Two warpgroups × 64 rows on Hopper's warpgroup MMA (wgmma, sm_90a;
	// kernels/cuda/sm90a/prefill_wg.cu): 128-position key/value tiles in
	// 128-byte swizzled shared memory, three stages. Where its module is missing (not
	// compute capability 9.0, or NVRTC/the driver refused it) it falls back
	// to fa2.
	{name: "wg", rows: 128, threads: 256, qSmem: true, perSM: 1, width64: true, sm90a: true, keys: 128, stages: 3},
	// wg with FlashAttention-3's ping-pong between the two warpgroups
	// (kernels/cuda/sm90a/prefill_wg6.cu, in wg's module): one warpgroup's
	// softmax runs while the other's wgmmas (S of its tile, P·V of its
	// previous one) are on the tensor cores, ordered by two named barriers;
	// same layout and shared memory, with warp-uniform descriptor
	// arithmetic, stepped copy addresses over contiguous caches,
	// warpgroup 0 copying the next tile while its wgmmas run, and the
	// output rescaled only when a row's maximum moves (the same sums as
	// wg; outputs within a bf16 unit of wg's). The default on compute
	// capability 9.0; fa2 where the module is missing.
	// Its varlen kernel also comes over the packed contiguous keys and
	// values of fresh sequences (contig; FT_VARLEN_CONTIG, varlencontig.go).
	{name: "wg6", rows: 128, threads: 256, qSmem: true, perSM: 1, width64: true, sm90a: true, keys: 128, stages: 3, contig: true},
}

// autoPrefillVariant is the choice for "" and "auto". Measured on the H200
// (2026-12-01, bench/h200-sweep3.sh), attention of 32 layers: w4m32 82.3 ms
// against base 90.2 at 8,192 tokens, and 41.3 against base 48.6 and m64
// 51.1 for 64 × 512 packed; so one choice serves long and short sequences.
// fa2 then measured faster again (fourth session, bench/h200-s4a.sh): 66.8
// against w4m32's 81.2 ms at 8,192 tokens (forward 230.6 against 238.6),
// and 64 × 512 packed 725.8 against 743.0 ms a forward. wg (warpgroup
// MMA) then measured faster on the H200 (fifth session, bench/h200-s5c.sh):
// attention 50.3 against fa2's 66.7 ms at 8,192 tokens (forward 215.8
// against 228.1 ms), 64 × 512 packed 728.3 against 733.8 ms. Off compute
// capability 9.0 wg falls back to fa2 (availablePrefill). wg3 (ping-pong
// between the two warpgroups) then measured faster (sixth session,
// bench/h200-s6a.sh and s6c.sh, interleaved runs): prefill 8,192 213.9,
// 212.7 and 212.9 ms against wg's 216.4, 219.4 and 214.8; 64 × 512 packed
// the same (737.8 against 738.0). wg6 (wg3 with fewer instructions a key
// tile) then measured faster (twentieth session, bench/h200-s20e.sh, same
// machine): attention of 32 layers at 8,192 tokens 40.9 against 44.0 ms,
// 64 × 512 packed 22.2 against 23.6; prefill 8,192 forwards 211.7, 216.1,
// 212.3 ms against 217.5, 217.6, 218.6; wg3 was then removed. Where its
// module (wg's) is missing, fa2 runs.
const autoPrefillVariant = "wg6"

// prefillVariantNames lists the values FT_PREFILL_VARIANT takes ("" and
// "auto" choose per call).
func prefillVariantNames() []string {
	names := []string{"auto"}
	for _, v := range prefillVariants {
		names = append(names, v.name)
	}
	return names
}

// smem is the dynamic shared memory of the variant at head width d: two
// stages of a 64-position key and a value tile, and the query tile when it
// is staged, rows of d+8 bf16 values (PREFILL_VSMEM in prefill_variants.cu,
// PREFILL_FA2_SMEM in prefill_fa2.cu); for wg 1 KiB of alignment slack,
// the query tile and its stages of keys and values, unpadded rows (WG_SMEM
// in sm90a/prefill_wg.cu).
func (v prefillVariant) smem(d int) int {
	if v.sm90a {
		return 1024 + v.rows*d*2 + v.stages*2*v.keys*d*2
	}
	n := 2 * 2 * 64 * (d + 8) * 2
	if v.qSmem {
		n += v.rows * (d + 8) * 2
	}
	return n
}

// kernel is the name of the variant's kernel of head width d, contiguous
// or varlen.
func (v prefillVariant) kernel(d int, varlen bool) string {
	kind := "attn_prefill_"
	if varlen {
		kind = "attn_varlen_prefill_"
	}
	if v.name == "base" {
		return fmt.Sprintf("%sd%d_bf16", kind, d)
	}
	return fmt.Sprintf("%s%s_d%d_bf16", kind, v.name, d)
}

// contigKernel is the name of the variant's varlen kernel of head width d
// over the packed contiguous keys and values of sequences that start at
// position 0 (Backend.PackedPrefillAttention), or "" where it has none.
func (v prefillVariant) contigKernel(d int) string {
	if !v.contig || !v.hasWidth(d) {
		return ""
	}
	return fmt.Sprintf("attn_varlen_contig_prefill_%s_d%d_bf16", v.name, d)
}

// hasWidth reports whether the variant is built for head width d.
func (v prefillVariant) hasWidth(d int) bool {
	if v.allWidths {
		return d == 32 || d == 64 || d == 128
	}
	return d == 128 || (v.width64 && d == 64)
}

// choosePrefillVariant picks the configuration for a prefill of head width
// d: setting (FT_PREFILL_VARIANT) names one, or with "" or "auto" it is
// autoPrefillVariant, long or short sequences alike. A variant not built
// for d, or one staging the queries when aligned is false (rows of q, out
// or the cache not 16-byte aligned), falls back to base.
func choosePrefillVariant(setting string, d int, varlen bool, aligned bool) (prefillVariant, error) {
	name := setting
	if name == "" || name == "auto" {
		name = autoPrefillVariant
	}
	for _, v := range prefillVariants {
		if v.name != name {
			continue
		}
		if !v.hasWidth(d) || (v.qSmem && !aligned) {
			return prefillVariants[0], nil
		}
		return v, nil
	}
	return prefillVariant{}, fmt.Errorf("FT_PREFILL_VARIANT=%q: want one of %s", setting, strings.Join(prefillVariantNames(), ", "))
}
