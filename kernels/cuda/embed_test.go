package cuda

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestSources checks that the embedded sources hold every kernel the CUDA
// backend looks up and that each has a comment saying what it computes.
func TestSources(t *testing.T) {
	src := Source()
	if !strings.HasPrefix(src, "// Helpers shared") {
		t.Fatalf("Source does not start with common.cuh: %q", src[:40])
	}
	names := Kernels()
	for _, want := range []string{"add_bf16", "add_bf16_v8", "argmax_rows", "attn_combine_bf16", "attn_flash_d128_bf16",
		"attn_flash_d32_bf16", "attn_flash_d64_bf16", "attn_split_bf16", "cast_any", "embedding_bf16", "fill_uniform_bf16",
		"gemv_bf16", "gemv_bf16_f32out", "rmsnorm_bf16", "rmsnorm_bf16_v8", "rope_bf16", "rope_store_bf16",
		"silu_mul_bf16", "silu_mul_bf16_v8", "store_rows_bf16", "add_f32", "add_f32_v4", "embedding_f32out", "rmsnorm_f32in_bf16",
		"gemv_persist_bf16", "gemv_persist_f32out", "gemv3_bf16", "gemv_gateup_silu_bf16", "attn_decode_d64_bf16", "attn_decode_d128_bf16", "add_bias_bf16", "scale_bf16", "gemv_fp8", "dequant_fp8_bf16",

		"attn_paged_split_bf16", "attn_paged_decode_d64_bf16", "attn_paged_decode_d128_bf16", "attn_varlen_flash_d32_bf16",
		"attn_varlen_flash_d64_bf16", "attn_varlen_flash_d128_bf16", "rope_store_paged_bf16",
		"moe_gather_rows_u16", "moe_scatter_add_f32", "moe_route_f32", "moe_gateup_bf16", "moe_down_f32out"} {
		if !slices.Contains(names, want) {
			t.Errorf("kernel %s missing from the sources (have %v)", want, names)
		}
	}
	lines := strings.Split(src, "\n")
	for i, line := range lines {
		if strings.HasPrefix(line, "extern \"C\" __global__") && (i == 0 || !strings.HasPrefix(lines[i-1], "//")) {
			t.Errorf("kernel at line %d has no doc comment: %s", i+1, line)
		}
	}
}

// TestSourceSM90a: the sm_90a translation unit starts with common.cuh and
// holds the wgmma prefill kernels (each with a doc comment), and Source,
// which every device compiles for its plain sm_XY, holds no wgmma.
func TestSourceSM90a(t *testing.T) {
	src := SourceSM90a()
	if !strings.HasPrefix(src, "// Helpers shared") {
		t.Fatalf("SourceSM90a does not start with common.cuh: %q", src[:40])
	}
	names := KernelsSM90a()
	for _, want := range []string{"attn_prefill_wg_d128_bf16", "attn_prefill_wg_d64_bf16", "attn_varlen_prefill_wg_d128_bf16",
		"attn_varlen_prefill_wg_d64_bf16"} {
		if !slices.Contains(names, want) {
			t.Errorf("kernel %s missing from SourceSM90a (have %v)", want, names)
		}
		if slices.Contains(Kernels(), want) {
			t.Errorf("kernel %s is in Source, which is compiled for plain sm_XY", want)
		}
	}
	if strings.Contains(Source(), "wgmma") {
		t.Error("Source holds wgmma, which plain sm_90 does not take")
	}
	lines := strings.Split(src, "\n")
	for i, line := range lines {
		if strings.HasPrefix(line, "extern \"C\" __global__") && (i == 0 || !strings.HasPrefix(lines[i-1], "//")) {
			t.Errorf("kernel at line %d has no doc comment: %s", i+1, line)
		}
	}
}

// TestSourceSM90aExtra: SM90aExtras lists only .cu files (not the
// directory's README.md); each experimental sm_90a file's unit is
// SourceSM90a followed by the file, with its kernels; they are not in
// SourceSM90a; an unknown name or a file that is not a .cu file is an error
// naming it.
func TestSourceSM90aExtra(t *testing.T) {
	extras := SM90aExtras()
	for _, name := range extras {
		if !strings.HasSuffix(name, ".cu") {
			t.Errorf("SM90aExtras lists %q, not a .cu file", name)
		}
	}
	if _, err := sm90aExtraFiles.ReadFile("sm90a/extra/README.md"); err != nil {
		t.Fatalf("sm90a/extra/README.md not embedded: %v", err)
	}
	if _, err := SourceSM90aExtra("README.md"); err == nil || !strings.Contains(err.Error(), `"README.md"`) {
		t.Errorf("README.md: error %v, want one naming it", err)
	}
	for _, name := range extras {
		src, err := SourceSM90aExtra(name)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(src, SourceSM90a()) {
			t.Errorf("%s: unit does not start with SourceSM90a", name)
		}
		ks := KernelsSM90aExtra(name)
		if len(ks) == 0 {
			t.Errorf("%s: no kernels", name)
		}
		for _, k := range ks {
			if !slices.Contains(kernelsIn(src), k) || slices.Contains(KernelsSM90a(), k) {
				t.Errorf("%s: kernel %s not only in its own unit", name, k)
			}
		}
	}
	if _, err := SourceSM90aExtra("nope.cu"); err == nil || !strings.Contains(err.Error(), `"nope.cu"`) {
		t.Errorf("unknown file: error %v, want one naming it", err)
	}
	if KernelsSM90aExtra("nope.cu") != nil {
		t.Error("unknown file has kernels")
	}
}

// TestSourceDecodeLayer: the one-kernel decode layer's unit is common.cuh
// (which defines rope_rotate, the rotation it shares with rope.cu) then
// decodelayer.cu, and holds decode_layer_bf16 with a doc comment; Source,
// which every backend compiles, holds neither that kernel nor the file, and
// still defines rope_rotate exactly once (common.cuh's).
func TestSourceDecodeLayer(t *testing.T) {
	src := SourceDecodeLayer()
	head, err := files.ReadFile("common.cuh")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(src, string(head)) || !strings.Contains(src, "\n// ---- decodelayer.cu ----\n") {
		t.Fatal("SourceDecodeLayer is not common.cuh then decodelayer.cu")
	}
	if !strings.Contains(string(head), "void rope_rotate(") {
		t.Error("common.cuh does not define rope_rotate, which decodelayer.cu calls")
	}
	if got := KernelsDecodeLayer(); !slices.Equal(got, []string{"decode_layer_bf16"}) {
		t.Errorf("SourceDecodeLayer's kernels: %v, want [decode_layer_bf16]", got)
	}
	if slices.Contains(Kernels(), "decode_layer_bf16") || strings.Contains(Source(), "// ---- decodelayer.cu ----") {
		t.Error("decodelayer.cu is in Source, which every backend compiles")
	}
	if n := strings.Count(Source(), "void rope_rotate("); n != 1 {
		t.Errorf("Source defines rope_rotate %d times, want once", n)
	}
	lines := strings.Split(src, "\n")
	for i, line := range lines {
		if strings.HasPrefix(line, "extern \"C\" __global__") && (i == 0 || !strings.HasPrefix(lines[i-1], "//")) {
			t.Errorf("kernel at line %d has no doc comment: %s", i+1, line)
		}
	}
}

// TestTraced: every kernel of Source gets exactly one FT_TRACE_SCOPE, its
// index in source order, first in its own body, and nothing else changes.
func TestTraced(t *testing.T) {
	src := Source()
	traced, names, err := Traced(src)
	if err != nil {
		t.Fatal(err)
	}
	var plain []string
	macros := 0
	for _, name := range names {
		if strings.Contains(name, "##") {
			macros++
		} else {
			plain = append(plain, name)
		}
	}
	slices.Sort(plain)
	if !slices.Equal(plain, Kernels()) {
		t.Fatalf("traced names %v, kernels %v", plain, Kernels())
	}
	if macros == 0 {
		t.Error("no kernel defined in a macro was traced (decode_tr.cu and gemvpipe.cu define theirs so)")
	}
	if got := strings.Count(traced, "FT_TRACE_SCOPE("); got != len(names)+strings.Count(src, "FT_TRACE_SCOPE(") {
		t.Fatalf("%d scopes for %d kernels", got, len(names))
	}
	for i, name := range names {
		if strings.Contains(name, "##") {
			continue
		}
		decl := strings.Index(traced, " "+name+"(")
		if decl < 0 {
			t.Fatalf("kernel %s not found", name)
		}
		body := decl + strings.IndexByte(traced[decl:], '{')
		want := fmt.Sprintf("{ FT_TRACE_SCOPE(%d)", i)
		if !strings.HasPrefix(traced[body:], want) {
			t.Errorf("kernel %s: body opens %q, want %q", name, traced[body:body+30], want)
		}
	}
	untraced := traced
	for i := range names {
		untraced = strings.Replace(untraced, fmt.Sprintf(" FT_TRACE_SCOPE(%d)", i), "", 1)
	}
	if untraced != src {
		t.Error("Traced changed more than the kernels' first statements")
	}
	for _, bad := range []string{
		"// x\nextern \"C\" __global__ void k(int* y);\nextern \"C\" __global__ void j(int* y) {}\n",
		"// x\nextern \"C\" __global__ void __launch_bounds__(32 k(int* y) {}\n",
		"// x\nextern \"C\" __global__ void (int* y) {}\n",
	} {
		if _, _, err := Traced(bad); err == nil {
			t.Errorf("traced %q", bad)
		}
	}
	got, _, err := Traced("// a comment naming extern \"C\" __global__ void k(int*) {\n#define K(N) \\\n\textern \"C\" __global__ void __launch_bounds__(F(2, 3)) \\\n\t\tk_##N(int* y) { *y = N; }\n")
	if want := "// a comment naming extern \"C\" __global__ void k(int*) {\n#define K(N) \\\n\textern \"C\" __global__ void __launch_bounds__(F(2, 3)) \\\n\t\tk_##N(int* y) { FT_TRACE_SCOPE(0) *y = N; }\n"; err != nil || got != want {
		t.Errorf("a kernel in a macro: %v\n%q\nwant\n%q", err, got, want)
	}
}
