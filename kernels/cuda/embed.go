// Package cuda holds the CUDA C++ sources of FlexTensor's GPU kernels,
// embedded so that the CUDA backend (package kernels/cudabackend) compiles
// them at run time with NVRTC for the GPU it finds. It is pure Go and builds
// everywhere; nothing in it is generated, and dependent_launch.txt (the
// kernels that call ft_pdl_wait, pdl.go) is checked against the sources by
// a test.
//
// Files: common.cuh (helpers, first), elementwise.cu (add, SiLU·up,
// embedding gather, KV-cache row stores, casts, random fill, argmax),
// norm.cu (RMSNorm), normrows.cu (RMSNorm of many rows), normtail.cu (the
// residual-adding GEMV with the RMSNorm after it done by its last block),
// rope.cu (RoPE, fused RoPE + KV store, also at per-token positions and
// pool rows), qknorm_rope.cu (a Qwen3-style layer's per-head q/k RMSNorm,
// RoPE and KV store as one kernel), decodelayer.cu (a plain layer's one-token step as one
// persistent kernel with grid barriers between its phases, FT_DECODE_MEGA;
// not part of Source: a unit of its own, SourceDecodeLayer), rope_qkv.cu (a decode step's q/k/v GEMV with the biases, RoPE
// and the KV store in its epilogue), decode_tr.cu (the transposed one-query
// decode attention), gemv.cu
// (one-token matrix-vector products; gemvpipe.cu: their software-pipelined
// twins, the default for all but q/k/v (FT_GEMV=mixed); FT_GEMV=persist runs
// gemv.cu's everywhere, FT_GEMV=pipe the twins everywhere), attention.cu (split-context decode
// attention and FlashAttention-2-style prefill on tensor cores), paged.cu
// (the same attentions over a paged KV cache: batched decode and packed
// variable-length prefill read through block tables), moe.cu (a mixture of
// experts' row gathers and weighted scatter-adds), moefused.cu (a mixture of
// experts for a few tokens without host sync: device routing, the routed
// experts' gate·up·SiLU and their weighted down projections, through a
// device table of weight pointers), decode_mma.cu (one-query decode
// attention on tensor cores, contiguous and paged, the splits merged by the
// last block), decode_pipe.cu (the same with keys and values streamed
// through a cp.async ring per warp and the split count chosen on the
// device), prefill.cu (prefill attention on tensor cores, 128 query
// rows per block, one body for a contiguous cache and for packed sequences
// over a paged pool; attention.cu's and paged.cu's flash kernels are the
// legacy path), prefill_variants.cu (other layouts of that kernel at head
// width 128, chosen by FT_PREFILL_VARIANT), fp8.cu and fp8gemv.cu (FP8 weights: one-token products that
// widen E4M3 in registers, fused q/k/v and gate·up·SiLU, dequantization to
// bf16 for cuBLAS; fp8gemvpipe.cu: software-pipelined variants of those
// products; fp8gemvmma.cu: the same three on the tensor cores, E4M3 widened
// to f16 into mma.sync, and their persistent forms, a wave of blocks
// looping over tiles). sm90a/ holds the kernels that need sm_90a
// (SourceSM90a). Each kernel's comment
// gives what it computes.
package cuda

import (
	"embed"
	"fmt"
	"sort"
	"strings"
)

//go:embed common.cuh *.cu
var files embed.FS

// Source is the main translation unit NVRTC compiles for every device:
// common.cuh, then the .cu files in name order, less those of ownUnit.
func Source() string { return unit(files, ".") }

// ownUnit lists the .cu files of this directory compiled as a unit of
// their own, not in Source, so that a backend that never runs their kernels
// pays neither their compile time nor their compile errors.
var ownUnit = map[string]bool{decodeLayerFile: true}

// decodeLayerFile holds decode_layer_bf16 (FT_DECODE_MEGA).
const decodeLayerFile = "decodelayer.cu"

// SourceDecodeLayer is the translation unit of the one-kernel decode layer
// (decodelayer.cu: decode_layer_bf16, FT_DECODE_MEGA): common.cuh (whose
// helpers, rope_rotate among them, it uses), then the file after a
// "// ---- decodelayer.cu ----" line. The CUDA backend compiles it as a
// module of its own on the first use of the op with the switch on.
func SourceDecodeLayer() string {
	head, err := files.ReadFile("common.cuh")
	if err != nil {
		panic(err) // embedded at build time
	}
	data, err := files.ReadFile(decodeLayerFile)
	if err != nil {
		panic(err)
	}
	return string(head) + "\n// ---- " + decodeLayerFile + " ----\n" + string(data)
}

// KernelsDecodeLayer lists the extern "C" kernel names in
// SourceDecodeLayer.
func KernelsDecodeLayer() []string { return kernelsIn(SourceDecodeLayer()) }

//go:embed sm90a/*.cu
var sm90aFiles embed.FS

// SourceSM90a is the translation unit of the kernels that need Hopper's
// architecture-specific features (sm_90a: warpgroup MMA), compiled as a
// module of their own on compute capability 9.0 only: common.cuh, then the
// .cu files of sm90a/ in name order (sm90a/prefill_wg.cu: prefill
// attention on wgmma, FT_PREFILL_VARIANT=wg; sm90a/prefill_wg6.cu: its
// ping-pong variant wg6, the default). They are not part of Source,
// which is compiled for every device's plain sm_XY.
func SourceSM90a() string { return unit(sm90aFiles, "sm90a") }

//go:embed sm90a/extra
var sm90aExtraFiles embed.FS

// SM90aExtras lists the .cu files of sm90a/extra/: experimental sm_90a
// variants, each compiled as a module of its own only when its variant is
// asked for, so that neither its compile time nor a compile error of it
// reaches the default's module (sm90a/extra/README.md). None now.
func SM90aExtras() []string {
	entries, err := sm90aExtraFiles.ReadDir("sm90a/extra")
	if err != nil {
		panic(err) // embedded at build time
	}
	var names []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".cu") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names
}

// SourceSM90aExtra is the translation unit of the experimental sm_90a file
// sm90a/extra/name: SourceSM90a (whose helpers it uses), then the file
// after a "// ---- sm90a/extra/NAME ----" line. A name not in SM90aExtras
// is an error naming it.
func SourceSM90aExtra(name string) (string, error) {
	data, err := sm90aExtraFiles.ReadFile("sm90a/extra/" + name)
	if err != nil || !strings.HasSuffix(name, ".cu") {
		return "", fmt.Errorf("kernels/cuda: no sm_90a extra source %q (have %v)", name, SM90aExtras())
	}
	return SourceSM90a() + "\n// ---- sm90a/extra/" + name + " ----\n" + string(data), nil
}

// unit is common.cuh followed by the .cu files of dir in fsys in name
// order (at the top, less those of ownUnit), each after a
// "// ---- path ----" line.
func unit(fsys embed.FS, dir string) string {
	var b strings.Builder
	head, err := files.ReadFile("common.cuh")
	if err != nil {
		panic(err) // embedded at build time
	}
	b.Write(head)
	entries, err := fsys.ReadDir(dir)
	if err != nil {
		panic(err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".cu") && !(dir == "." && ownUnit[e.Name()]) {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	for _, n := range names {
		path := n
		if dir != "." {
			path = dir + "/" + n
		}
		data, err := fsys.ReadFile(path)
		if err != nil {
			panic(err)
		}
		b.WriteString("\n// ---- " + path + " ----\n")
		b.Write(data)
	}
	return b.String()
}

// Kernels lists the extern "C" kernel names in the sources (Source).
func Kernels() []string { return kernelsIn(Source()) }

// KernelsSM90a lists the extern "C" kernel names in SourceSM90a.
func KernelsSM90a() []string { return kernelsIn(SourceSM90a()) }

// KernelsSM90aExtra lists the extern "C" kernel names that
// sm90a/extra/name adds to SourceSM90a (nil for an unknown name).
func KernelsSM90aExtra(name string) []string {
	data, err := sm90aExtraFiles.ReadFile("sm90a/extra/" + name)
	if err != nil {
		return nil
	}
	return kernelsIn(string(data))
}

// Traced is src with "FT_TRACE_SCOPE(n)" put first in the body of its
// n-th kernel definition (source order; names[n] is that kernel's name),
// for a module compiled with -DFT_BLOCK_TRACE (common.cuh's block tracing,
// FT_BLOCK_TRACE): every block of every kernel then records its start, its
// dependent-launch wait and its end. Kernels defined inside a macro share
// one index, named as written there (with its ## pastes). A kernel whose
// name or body does not follow is an error: the source is not what this
// transform knows.
func Traced(src string) (traced string, names []string, err error) {
	const decl = "extern \"C\" __global__ void"
	var b strings.Builder
	rest := src
	for {
		i := strings.Index(rest, decl)
		if i < 0 {
			b.WriteString(rest)
			break
		}
		if line := strings.LastIndexByte(rest[:i], '\n'); strings.TrimSpace(rest[line+1:i]) != "" {
			b.WriteString(rest[:i+len(decl)]) // not at the start of a line: in a comment or a string
			rest = rest[i+len(decl):]
			continue
		}
		name, ok := kernelName(rest[i+len(decl):])
		brace := strings.IndexByte(rest[i:], '{')
		if !ok || brace < 0 || strings.Contains(rest[i:i+brace], ";") {
			end := min(len(rest), i+80)
			return "", nil, fmt.Errorf("kernels: tracing: cannot find the name and body of %q", rest[i:end])
		}
		at := i + brace + 1
		b.WriteString(rest[:at])
		fmt.Fprintf(&b, " FT_TRACE_SCOPE(%d)", len(names))
		names = append(names, name)
		rest = rest[at:]
	}
	return b.String(), names, nil
}

// kernelAttrs are the attribute macros a kernel's declaration may carry
// between "void" and its name.
var kernelAttrs = []string{"__launch_bounds__", "FT_CLUSTER_Y"}

// skipAttrs is s past any kernelAttrs(…) at its start (and the spaces,
// tabs, newlines and macro line continuations around them); ok false
// where an attribute's parentheses do not close.
func skipAttrs(s string) (string, bool) {
	s = strings.TrimLeft(s, " \t\\\n")
	for {
		attr := ""
		for _, a := range kernelAttrs {
			if strings.HasPrefix(s, a) {
				attr = a
			}
		}
		if attr == "" {
			return s, true
		}
		depth, i := 0, len(attr)
		for ; i < len(s); i++ {
			if s[i] == '(' {
				depth++
			} else if s[i] == ')' {
				if depth--; depth == 0 {
					break
				}
			}
		}
		if i >= len(s) {
			return "", false
		}
		s = strings.TrimLeft(s[i+1:], " \t\\\n")
	}
}

// kernelName is the name at the start of s, the text after a kernel's
// "void": past its attributes (kernelAttrs), up to the "(" of the
// parameters; the characters of an identifier and the ## of a macro paste.
func kernelName(s string) (string, bool) {
	s, ok := skipAttrs(s)
	if !ok {
		return "", false
	}
	n := 0
	for n < len(s) && (s[n] == '_' || s[n] == '#' || s[n] >= 'a' && s[n] <= 'z' || s[n] >= 'A' && s[n] <= 'Z' || s[n] >= '0' && s[n] <= '9') {
		n++
	}
	if n == 0 || n >= len(s) || s[n] != '(' {
		return "", false
	}
	return s[:n], true
}

// kernelsIn lists the extern "C" kernel names declared in src.
func kernelsIn(src string) []string {
	var out []string
	for _, line := range strings.Split(src, "\n") {
		if !strings.HasPrefix(line, "extern \"C\" __global__ void") {
			continue
		}
		rest, ok := skipAttrs(strings.TrimPrefix(line, "extern \"C\" __global__ void"))
		if !ok {
			continue
		}
		if i := strings.Index(rest, "("); i > 0 {
			out = append(out, rest[:i])
		}
	}
	sort.Strings(out)
	return out
}
