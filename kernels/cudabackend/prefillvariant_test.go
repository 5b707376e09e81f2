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
		{"", 128, false, true, "wg", "attn_prefill_wg_d128_bf16", 128, 256},
		{"auto", 128, false, true, "wg", "attn_prefill_wg_d128_bf16", 128, 256},
		{"", 128, true, true, "wg", "attn_varlen_prefill_wg_d128_bf16", 128, 256},
		{"", 128, false, false, "base", "attn_prefill_d128_bf16", 128, 256},
		{"", 64, true, true, "wg", "attn_varlen_prefill_wg_d64_bf16", 128, 256},
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
		{"wg2", 128, false, true, "wg2", "attn_prefill_wg2_d128_bf16", 128, 256},
		{"wg2", 128, true, true, "wg2", "attn_varlen_prefill_wg2_d128_bf16", 128, 256},
		{"wg2", 64, false, true, "wg2", "attn_prefill_wg2_d64_bf16", 128, 256},
		{"wg2", 64, true, true, "wg2", "attn_varlen_prefill_wg2_d64_bf16", 128, 256},
		{"wg2", 32, true, true, "base", "attn_varlen_prefill_d32_bf16", 128, 256},
		{"wg2", 64, false, false, "base", "attn_prefill_d64_bf16", 128, 256},
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
	want := map[string]int{"base": 69632, "w4m32": 104448, "w8q": 104448, "m64": 69632, "fa2": 104448, "wg": 230400, "wg2": 230400}
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
		if v.rows%(v.threads/32*16) != 0 {
			t.Errorf("%s: %d rows do not split into m16 tiles over %d warps", v.name, v.rows, v.threads/32)
		}
	}
}

// TestPrefillVariantKernelNames: every kernel name the backend asks for is
// declared in the source it looks it up in: the sm90a variants' in
// SourceSM90a (their own module), the others' in Source.
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
				if !slices.Contains(in, name) {
					t.Errorf("%s: kernel %s not in %s", v.name, name, src)
				}
			}
		}
	}
}

// TestWithoutSM90aFile: the sm_90a source without an optional variant's
// file keeps wg's kernels and loses exactly that file's, and a file not in
// the source leaves it unchanged.
func TestWithoutSM90aFile(t *testing.T) {
	src := kcuda.SourceSM90a()
	for _, o := range sm90aOptional {
		cut := withoutSM90aFile(src, o.file)
		if len(cut) >= len(src) {
			t.Fatalf("%s: nothing cut", o.file)
		}
		for _, v := range prefillVariants {
			if !v.sm90a {
				continue
			}
			for _, d := range []int{64, 128} {
				for _, varlen := range []bool{false, true} {
					name := v.kernel(d, varlen)
					if has := strings.Contains(cut, " "+name+"("); has != (v.name != o.variant) {
						t.Errorf("without %s: %s present %v", o.file, name, has)
					}
				}
			}
		}
		if !strings.HasPrefix(cut, src[:strings.Index(src, "// ---- sm90a/")]) {
			t.Errorf("without %s: common.cuh changed", o.file)
		}
	}
	if withoutSM90aFile(src, "nonexistent.cu") != src {
		t.Error("a file not in the source changed it")
	}
}
