//go:build cuda

package cudabackend

import (
	"fmt"
	"os"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// Prefill attention and the fused RoPE + KV store of a prefill
// (kernels/cuda/prefill.cu, rope.cu): the tensor-core kernels with 128
// query rows per block and double-buffered keys and values, for a
// contiguous cache (Attention with more than one token) and for packed
// sequences over a paged pool (VarlenPrefillAttention), head widths 32, 64
// and 128 (prefill_fa2.cu's variant fa2: 64 and 128); and RoPE + store with
// 16-byte accesses and one cos/sin per (token, frequency).
//
// Switches: Backend.LegacyFlash (FT_FLASH=legacy in the environment when
// the backend is made) runs the earlier 64-row kernels (attn_flash_*,
// attn_varlen_flash_*) and the scalar RoPE + store kernels instead, for A/B
// runs; Backend.PrefillVariant (FT_PREFILL_VARIANT) picks the layout of the
// tensor-core kernel (prefillvariant.go, prefill_variants.cu).

// legacyTileRows is how many query rows one block of the legacy kernels
// takes; the prefill kernels' tiles are their variant's rows.
const legacyTileRows = 64

// prefillKernels are the kernels of prefill.cu and prefill_variants.cu and
// the vectorised RoPE + store kernels of rope.cu.
type prefillKernels struct {
	fns                       map[string]*cuda.Function // attention, by kernel name (prefillVariant.kernel)
	ropeStore, ropeStorePaged *cuda.Function
	wg                        map[string]*prefillWG // the sm_90a modules' kernels by extra file ("": variant wg; prefillwg.go), each loaded on first use
}

// loadPrefill looks the kernels up in the compiled module.
func loadPrefill(get func(string) *cuda.Function) prefillKernels {
	k := prefillKernels{fns: map[string]*cuda.Function{},
		ropeStore: get("rope_store_v8_bf16"), ropeStorePaged: get("rope_store_paged_v8_bf16")}
	for _, v := range prefillVariants {
		if v.sm90a { // not in this module (prefillwg.go)
			continue
		}
		for _, d := range []int{32, 64, 128} {
			if v.hasWidth(d) {
				for _, varlen := range []bool{false, true} {
					n := v.kernel(d, varlen)
					k.fns[n] = get(n)
				}
			}
		}
	}
	return k
}

// allowSmem lets the kernels that need more than 48 KiB of dynamic shared
// memory (head width 128: 68 KiB, 102 KiB with the query tile staged) ask
// for it. A kernel the device cannot give that much (sm_86 and sm_89 allow
// 99 KiB a block) is dropped from fns: its variant falls back to base, and
// without base the prefill takes the legacy kernels.
func (k *prefillKernels) allowSmem() {
	for _, v := range prefillVariants {
		if v.sm90a {
			continue
		}
		for _, d := range []int{32, 64, 128} {
			if !v.hasWidth(d) || v.smem(d) <= 48<<10 {
				continue
			}
			for _, varlen := range []bool{false, true} {
				name := v.kernel(d, varlen)
				if f := k.fns[name]; f != nil && f.SetMaxDynamicSharedMemory(v.smem(d)) != nil {
					delete(k.fns, name)
				}
			}
		}
	}
}

// availablePrefill is v, or base where the device could not take v's
// kernel; an sm_90a variant falls back to wg (from another module), then
// fa2 first (a module is missing off compute capability 9.0, or where it
// did not compile or load).
func (b *Backend) availablePrefill(v prefillVariant, d int, varlen bool) prefillVariant {
	if b.prefillKernel(v, d, varlen) != nil {
		return v
	}
	if v.sm90a {
		for _, name := range []string{"wg", "fa2"} {
			for _, f := range prefillVariants {
				if f.name == name && f.name != v.name && f.hasWidth(d) && b.prefillKernel(f, d, varlen) != nil {
					return f
				}
			}
		}
	}
	return prefillVariants[0]
}

// prefillVariantFromEnv is the default of Backend.PrefillVariant.
func prefillVariantFromEnv() string { return os.Getenv("FT_PREFILL_VARIANT") }

// prefillKernel is the kernel of variant v for head width d, or nil. The
// sm_90a module of the variant (wg's, which wg6 shares, or an experiment's
// own) is compiled and loaded on the first call that asks for it.
func (b *Backend) prefillKernel(v prefillVariant, d int, varlen bool) *cuda.Function {
	if v.sm90a {
		return b.k.prefill.wg[v.extra].function(v.kernel(d, varlen))
	}
	return b.k.prefill.fns[v.kernel(d, varlen)]
}

// legacyFlashFromEnv is the default of Backend.LegacyFlash.
func legacyFlashFromEnv() bool { return os.Getenv("FT_FLASH") == "legacy" }

// flashAttention launches the prefill kernel of head width d over a
// contiguous cache, or reports false where there is none (the caller then
// takes the split kernels).
func (b *Backend) flashAttention(out, q, kc, vc uintptr, T, H, K, d int, posp, p0 uint64, scale float32, window int) (bool, error) {
	if b.LegacyFlash {
		f, ok := b.k.flash[d]
		if !ok {
			return false, nil
		}
		return true, f.Launch(b.s, cuda.Dim3{X: (T + legacyTileRows - 1) / legacyTileRows, Y: H}, cuda.Dim3{X: 128}, 0,
			cuda.Ptr(out), cuda.Ptr(q), cuda.Ptr(kc), cuda.Ptr(vc),
			cuda.I32(T), cuda.I32(H), cuda.I32(K), posp, p0, cuda.F32(scale), cuda.I32(window))
	}
	if d != 32 && d != 64 && d != 128 {
		return false, nil
	}
	v, err := choosePrefillVariant(b.PrefillVariant, d, false, aligned16(out, q, kc, vc))
	if err != nil {
		return true, fmt.Errorf("cudabackend: %w", err)
	}
	v = b.availablePrefill(v, d, false)
	f := b.prefillKernel(v, d, false)
	if f == nil {
		return false, nil
	}
	// Heads in x, query tiles in y: every head's latest tile starts first.
	return true, f.Launch(b.s, cuda.Dim3{X: H, Y: (T + v.rows - 1) / v.rows}, cuda.Dim3{X: v.threads},
		v.smem(d), cuda.Ptr(out), cuda.Ptr(q), cuda.Ptr(kc), cuda.Ptr(vc),
		cuda.I32(T), cuda.I32(H), cuda.I32(K), posp, p0, cuda.F32(scale), cuda.I32(window))
}

// varlenFlash launches the varlen prefill kernel of head width d (the
// legacy one with LegacyFlash, or with more than 65,535 query tiles of the
// chosen variant), or reports false where there is none.
func (b *Backend) varlenFlash(out, q, kPool, vPool uintptr, qStarts []int32, kv kernels.PagedKV, H, K, d, window int, scale float32) (bool, error) {
	legacy := b.LegacyFlash
	if d != 32 && d != 64 && d != 128 {
		return false, nil
	}
	v, err := choosePrefillVariant(b.PrefillVariant, d, true, aligned16(out, q, kPool, vPool))
	if err != nil {
		return true, fmt.Errorf("cudabackend: %w", err)
	}
	v = b.availablePrefill(v, d, true)
	tiles := varlenTiles(qStarts, kv, int32(v.rows))
	if len(tiles)/2 > 65535 { // past the grid's y extent: the legacy kernel has the tiles in x
		legacy = true
	}
	f, ok := b.prefillKernel(v, d, true), true
	if legacy {
		f, ok = b.k.paged.flash[d]
		tiles = varlenTiles(qStarts, kv, legacyTileRows)
	}
	if !ok || f == nil {
		return false, nil
	}
	N := len(kv.SeqLens)
	nt := len(tiles) / 2
	meta := make([]int32, 0, len(tiles)+2*N+1+len(kv.BlockTable))
	meta = append(meta, tiles...)
	meta = append(meta, qStarts...)
	meta = append(meta, kv.SeqLens...)
	meta = append(meta, kv.BlockTable...)
	base, err := b.uploadMeta(&b.meta.prefill, meta, "varlen attention tables")
	if err != nil {
		return true, err
	}
	tilesP := base
	startsP := tilesP + uintptr(4*len(tiles))
	lensP := startsP + uintptr(4*(N+1))
	tableP := lensP + uintptr(4*N)
	args := []uint64{cuda.Ptr(out), cuda.Ptr(q), cuda.Ptr(kPool), cuda.Ptr(vPool),
		cuda.I32(H), cuda.I32(K), cuda.Ptr(tilesP), cuda.Ptr(startsP), cuda.Ptr(lensP), cuda.Ptr(tableP),
		cuda.I32(kv.MaxBlocks), cuda.I32(kv.BlockSize), cuda.F32(scale), cuda.I32(window)}
	if legacy {
		return true, f.Launch(b.s, cuda.Dim3{X: nt, Y: H}, cuda.Dim3{X: 128}, 0, args...)
	}
	// Heads in x, tiles (longest first) in y, as flashAttention.
	return true, f.Launch(b.s, cuda.Dim3{X: H, Y: nt}, cuda.Dim3{X: v.threads}, v.smem(d), args...)
}

// ropeStoreV8 reports whether the vectorised RoPE + store kernels apply:
// not LegacyFlash, head width a multiple of 16, every row 16-byte aligned.
func (b *Backend) ropeStoreV8(d int, ptrs ...uintptr) bool {
	return !b.LegacyFlash && d%16 == 0 && aligned16(ptrs...)
}

// ropeStoreV8Launch launches f (rope_store_v8_bf16 or its paged twin) for T
// tokens of head width d with args: one block of 128 threads per token, d/2
// cos/sin pairs of shared memory.
func (b *Backend) ropeStoreV8Launch(f *cuda.Function, T, d int, args ...uint64) error {
	return f.Launch(b.s, cuda.Dim3{X: T}, cuda.Dim3{X: 128}, d/2*8, args...)
}
