package cudabackend

import (
	"slices"
	"strings"
	"testing"

	kcuda "github.com/flextensor-go/flextensor/kernels/cuda"
)

// TestChoosePrefillVariant: the automatic choice (fa2 where built, base
// elsewhere), forced variants, the
// fallbacks to base (head width without the variant, unaligned rows), and
// an unknown setting's error.
func TestChoosePrefillVariant(t *testing.T) {
	for _, c := range []struct {
		setting           string
		d                 int
		varlen            bool
		aligned           bool
		want, wantKernel  string
		wantRows, threads int
	}{
		{"", 128, false, true, "wg6", "attn_prefill_wg6_d128_bf16", 128, 256},
		{"auto", 128, false, true, "wg6", "attn_prefill_wg6_d128_bf16", 128, 256},
		{"", 128, true, true, "wg6", "attn_varlen_prefill_wg6_d128_bf16", 128, 256},
		{"", 128, false, false, "base", "attn_prefill_d128_bf16", 128, 256},
		{"", 64, true, true, "wg6", "attn_varlen_prefill_wg6_d64_bf16", 128, 256},
		{"", 32, true, true, "base", "attn_varlen_prefill_d32_bf16", 128, 256},
		{"w4m32", 128, false, true, "w4m32", "attn_prefill_w4m32_d128_bf16", 128, 128},
		{"w4m32", 128, true, true, "w4m32", "attn_varlen_prefill_w4m32_d128_bf16", 128, 128},
		{"w4m32", 128, false, false, "base", "attn_prefill_d128_bf16", 128, 256},
		{"w8q", 32, false, true, "base", "attn_prefill_d32_bf16", 128, 256},
		{"w8q", 128, true, true, "w8q", "attn_varlen_prefill_w8q_d128_bf16", 128, 256},
		{"m64", 128, false, false, "m64", "attn_prefill_m64_d128_bf16", 64, 128},
		{"base", 128, true, true, "base", "attn_varlen_prefill_d128_bf16", 128, 256},
		{"fa2", 128, false, true, "fa2", "attn_prefill_fa2_d128_bf16", 128, 128},
		{"fa2", 128, true, true, "fa2", "attn_varlen_prefill_fa2_d128_bf16", 128, 128},
		{"fa2", 64, false, true, "fa2", "attn_prefill_fa2_d64_bf16", 128, 128},
		{"fa2", 64, true, true, "fa2", "attn_varlen_prefill_fa2_d64_bf16", 128, 128},
		{"fa2", 32, true, true, "base", "attn_varlen_prefill_d32_bf16", 128, 256},
		{"fa2", 128, true, false, "base", "attn_varlen_prefill_d128_bf16", 128, 256},
		{"w4m32", 64, false, true, "base", "attn_prefill_d64_bf16", 128, 256},
		{"wg", 128, false, true, "wg", "attn_prefill_wg_d128_bf16", 128, 256},
		{"wg", 128, true, true, "wg", "attn_varlen_prefill_wg_d128_bf16", 128, 256},
		{"wg", 64, false, true, "wg", "attn_prefill_wg_d64_bf16", 128, 256},
		{"wg", 64, true, true, "wg", "attn_varlen_prefill_wg_d64_bf16", 128, 256},
		{"wg", 32, false, true, "base", "attn_prefill_d32_bf16", 128, 256},
		{"wg", 128, true, false, "base", "attn_varlen_prefill_d128_bf16", 128, 256},
		{"wg6", 128, false, true, "wg6", "attn_prefill_wg6_d128_bf16", 128, 256},
		{"wg6", 128, true, true, "wg6", "attn_varlen_prefill_wg6_d128_bf16", 128, 256},
		{"wg6", 64, false, true, "wg6", "attn_prefill_wg6_d64_bf16", 128, 256},
		{"wg6", 64, true, true, "wg6", "attn_varlen_prefill_wg6_d64_bf16", 128, 256},
		{"wg6", 32, true, true, "base", "attn_varlen_prefill_d32_bf16", 128, 256},
		{"wg6", 64, false, false, "base", "attn_prefill_d64_bf16", 128, 256},
	} {
		v, err := choosePrefillVariant(c.setting, c.d, c.varlen, c.aligned)
		if err != nil {
			t.Errorf("%+v: %v", c, err)
			continue
		}
		if v.name != c.want || v.kernel(c.d, c.varlen) != c.wantKernel || v.rows != c.wantRows || v.threads != c.threads {
			t.Errorf("%q d%d varlen %v aligned %v: %s (%s, %d rows, %d threads), want %s (%s, %d rows, %d threads)",
				c.setting, c.d, c.varlen, c.aligned, v.name, v.kernel(c.d, c.varlen), v.rows, v.threads,
				c.want, c.wantKernel, c.wantRows, c.threads)
		}
	}
	_, err := choosePrefillVariant("w4m16", 128, false, true)
	if err == nil || !strings.Contains(err.Error(), `FT_PREFILL_VARIANT="w4m16"`) || !strings.Contains(err.Error(), "w4m32") {
		t.Errorf("unknown variant: error %v, want one naming the setting and the choices", err)
	}
}

// TestPrefillVariantSmem: the dynamic shared memory of each variant at head
// width 128 (two key/value stages, plus the query tile when staged) fits
// the blocks per SM it is built for within the H100/H200's 227 KiB per SM
// (each block also reserves 1 KiB), and one block fits the 227 KiB limit.
func TestPrefillVariantSmem(t *testing.T) {
	want := map[string]int{"base": 69632, "w4m32": 104448, "w8q": 104448, "m64": 69632, "fa2": 104448, "wg": 230400, "wg6": 230400}
	for _, v := range prefillVariants {
		n := v.smem(128)
		if n != want[v.name] {
			t.Errorf("%s: %d bytes, want %d", v.name, n, want[v.name])
		}
		if v.perSM*(n+1024) > 228<<10 {
			t.Errorf("%s: %d blocks of %d bytes do not fit an SM", v.name, v.perSM, n)
		}
		if v.hasWidth(64) && v.perSM*(v.smem(64)+1024) > 228<<10 {
			t.Errorf("%s: %d blocks of %d bytes (head width 64) do not fit an SM", v.name, v.perSM, v.smem(64))
		}
		if w := v.threads / 32; v.rows%(w*16) != 0 {
			t.Errorf("%s: %d rows do not split into m16 tiles over %d warps", v.name, v.rows, w)
		}
	}
}

// TestPrefillVariantKernelNames: every kernel name the backend asks for is
// declared in the source it looks it up in: the sm90a variants' in
// SourceSM90a (wg, wg6) or in their own file of sm90a/extra (compiled as
// SourceSM90aExtra; none now), the others' in Source; no extra file's kernel is in
// SourceSM90a (it would be compiled with the default's module).
func TestPrefillVariantKernelNames(t *testing.T) {
	plain, sm90a := kcuda.Kernels(), kcuda.KernelsSM90a()
	for _, v := range prefillVariants {
		for _, d := range []int{32, 64, 128} {
			if !v.hasWidth(d) {
				continue
			}
			for _, varlen := range []bool{false, true} {
				name, in, src := v.kernel(d, varlen), plain, "Source"
				if v.sm90a {
					in, src = sm90a, "SourceSM90a"
				}
				if v.extra != "" {
					in, src = kcuda.KernelsSM90aExtra(v.extra), "sm90a/extra/"+v.extra
					if slices.Contains(sm90a, name) {
						t.Errorf("%s: kernel %s is in SourceSM90a, the default's module", v.name, name)
					}
				}
				if !slices.Contains(in, name) {
					t.Errorf("%s: kernel %s not in %s", v.name, name, src)
				}
			}
		}
	}
}

// TestSM90aExtraVariants: every file of kernels/cuda/sm90a/extra is some
// sm90a variant's (or the fused-epilogue GEMMs', gemmFusedFile), only
// sm90a variants have one, and its unit is SourceSM90a followed by the
// file.
func TestSM90aExtraVariants(t *testing.T) {
	used := map[string]bool{gemmFusedFile: true}
	for _, v := range prefillVariants {
		if v.extra == "" {
			continue
		}
		if !v.sm90a {
			t.Errorf("%s: extra file %s but not an sm90a variant", v.name, v.extra)
		}
		used[v.extra] = true
		src, err := kcuda.SourceSM90aExtra(v.extra)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(src, kcuda.SourceSM90a()) || !strings.Contains(src, "\n// ---- sm90a/extra/"+v.extra+" ----\n") {
			t.Errorf("%s: SourceSM90aExtra(%s) is not SourceSM90a then the file", v.name, v.extra)
		}
	}
	for _, f := range kcuda.SM90aExtras() {
		if !used[f] {
			t.Errorf("sm90a/extra/%s: no variant compiles it", f)
		}
	}
}
