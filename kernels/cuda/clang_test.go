package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// clangFor is the clang that TestSourcesCompileClang runs: $FT_CLANG, else
// clang-14 or clang on the PATH; "" when there is none.
func clangFor() string {
	if c := os.Getenv("FT_CLANG"); c != "" {
		return c
	}
	for _, name := range []string{"clang-14", "clang"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// clangCheck runs clang over CUDA device code: parse and type-check,
// testdata/clangshim.h included first, in a scratch directory of t's.
type clangCheck struct {
	clang, shim, inc, dir string
}

// newClangCheck is the check with the clang on this machine; t is skipped
// when there is none.
func newClangCheck(t *testing.T) clangCheck {
	t.Helper()
	clang := clangFor()
	if clang == "" {
		t.Skip("no clang on the PATH (apt-get install clang-14, or FT_CLANG=...)")
	}
	shim, err := filepath.Abs("testdata/clangshim.h")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// clang's __clang_cuda_intrinsics.h includes this CUDA SDK header.
	inc := filepath.Join(dir, "inc")
	if err := os.MkdirAll(filepath.Join(inc, "crt"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(inc, "crt", "sm_70_rt.hpp"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return clangCheck{clang: clang, shim: shim, inc: inc, dir: dir}
}

// run checks src (written to name.cu) with the extra arguments and returns
// the command line, clang's output and its error.
func (c clangCheck) run(t *testing.T, name, src string, extra ...string) (cmd string, out []byte, err error) {
	t.Helper()
	path := filepath.Join(c.dir, name+".cu")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"-x", "cuda", "--cuda-device-only", "--cuda-gpu-arch=sm_80", "-nocudainc", "-nocudalib",
		"-fsyntax-only", "-std=c++17", "-I" + c.inc, "-include", c.shim, path}, extra...)
	out, err = exec.Command(c.clang, args...).CombinedOutput()
	return c.clang + " " + strings.Join(args, " "), out, err
}

// kernelUnits are the kernel translation units by name: "main" (Source),
// "decodelayer", "sm90a" and "sm90a-<file>" for each of its extras.
func kernelUnits(t *testing.T) map[string]string {
	t.Helper()
	units := map[string]string{"main": Source(), "decodelayer": SourceDecodeLayer(), "sm90a": SourceSM90a()}
	for _, name := range SM90aExtras() {
		src, err := SourceSM90aExtra(name)
		if err != nil {
			t.Fatal(err)
		}
		units["sm90a-"+name] = src
	}
	return units
}

// unitFlags are the extra clang arguments of the unit of that name: clang
// 14 has no sm_90a target, so the sm_90a sources' guard against another
// architecture is told it is one.
func unitFlags(name string) []string {
	if strings.HasPrefix(name, "sm90a") {
		return []string{"-D__CUDA_ARCH_FEAT_SM90_ALL"}
	}
	return nil
}

// TestSourcesCompileClang parses and type-checks every kernel unit (Source,
// SourceDecodeLayer, SourceSM90a and its extras) as CUDA device code with
// clang (testdata/clangshim.h standing in for what NVRTC provides), so that
// a mistake in the C++ of a kernel fails here, on a machine without a GPU,
// not as an NVRTC error that stops every kernel of the module on the GPU
// machine; "main-sm90" checks the sm_90-only code too. The inline PTX is not checked (NVRTC assembles it there). Skips
// when no clang is installed (.ci/run installs clang-14; FT_CLANG names
// another).
func TestSourcesCompileClang(t *testing.T) {
	c := newClangCheck(t)
	units := kernelUnits(t)
	traced, _, err := Traced(Source())
	if err != nil {
		t.Fatal(err)
	}
	units["main-traced"] = traced
	// clang 14 has no sm_90 target, so the code behind __CUDA_ARCH__ >= 900
	// (the thread-block clusters, the dependent-launch calls) is checked by
	// telling those guards sm_80 is enough.
	units["main-sm90"] = strings.ReplaceAll(Source(), "__CUDA_ARCH__ >= 900", "__CUDA_ARCH__ >= 800")
	for name, src := range units {
		t.Run(name, func(t *testing.T) {
			var extra []string
			if name == "main-traced" {
				extra = append(extra, "-DFT_BLOCK_TRACE")
			}
			extra = append(extra, unitFlags(name)...)
			if cmd, out, err := c.run(t, name, src, extra...); err != nil {
				t.Fatalf("%s: %v\n%s", cmd, err, out)
			}
		})
	}
}

// TestSourcesCompileClangCatches: the check fails on a kernel unit with a
// C++ mistake (a template argument list closed early, an undeclared name).
func TestSourcesCompileClangCatches(t *testing.T) {
	c := newClangCheck(t)
	for _, bad := range []string{
		"template <int R> __device__ int f() { return R; }\n" +
			"extern \"C\" __global__ void k(int* y) { const int R = 2; *y = f<R > 0 ? R : 1>(); }\n",
		"extern \"C\" __global__ void k(int* y) { *y = not_declared(threadIdx.x); }\n",
	} {
		if _, out, err := c.run(t, "bad", Source()+"\n"+bad); err == nil || !strings.Contains(string(out), "error") {
			t.Errorf("clang accepted %q: %v\n%s", bad, err, out)
		}
	}
}
