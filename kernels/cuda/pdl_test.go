package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// unitIR compiles src's device code to LLVM IR with clang (the same shim
// as the clang check; the sm_90 guards told sm_80 is enough, so that
// ft_pdl_wait's griddepcontrol.wait is compiled in; -O0, where clang
// still inlines the __forceinline__ helpers) and returns the IR's text.
func (c clangCheck) unitIR(t *testing.T, name, src string, extra ...string) string {
	t.Helper()
	src = strings.ReplaceAll(src, "__CUDA_ARCH__ >= 900", "__CUDA_ARCH__ >= 800")
	path := filepath.Join(c.dir, name+".cu")
	ll := filepath.Join(c.dir, name+".ll")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"-x", "cuda", "--cuda-device-only", "--cuda-gpu-arch=sm_80", "-nocudainc", "-nocudalib",
		"-S", "-emit-llvm", "-O0", "-std=c++17", "-Xclang", "-target-feature", "-Xclang", "+ptx75",
		"-I" + c.inc, "-include", c.shim, path, "-o", ll}, extra...)
	if out, err := exec.Command(c.clang, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", c.clang, strings.Join(args, " "), err, out)
	}
	ir, err := os.ReadFile(ll)
	if err != nil {
		t.Fatal(err)
	}
	return string(ir)
}

// pdlWaiters are the kernels of src whose code reaches griddepcontrol.wait:
// in their own body (inlined) or through the device functions they call.
func (c clangCheck) pdlWaiters(t *testing.T, name, src string, extra ...string) []string {
	t.Helper()
	return waitersInIR(c.unitIR(t, name, src, extra...))
}

// kernelsInIR are the kernels (nvvm.annotations "kernel") a unit's IR
// defines.
func kernelsInIR(ir string) []string {
	var out []string
	for _, m := range irKernel.FindAllStringSubmatch(ir, -1) {
		if !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	return out
}

var (
	irDefine = regexp.MustCompile(`(?ms)^define [^@\n]*@"?([\w.$]+)"?\(.*?^\}`)
	irCall   = regexp.MustCompile(`call [^@\n]*@"?([\w.$]+)"?\(`)
	irKernel = regexp.MustCompile(`!\{[^@\n]*@"?([\w.$]+)"?, !"kernel", i32 1\}`)
)

// waitersInIR is pdlWaiters' reading of a unit's LLVM IR: the kernels
// (nvvm.annotations "kernel") whose function, or a function it calls,
// directly or not, holds griddepcontrol.wait; sorted.
func waitersInIR(ir string) []string {
	calls := map[string][]string{}
	waits := map[string]bool{}
	for _, m := range irDefine.FindAllStringSubmatch(ir, -1) {
		name, body := m[1], m[0]
		if strings.Contains(body, "griddepcontrol.wait") {
			waits[name] = true
		}
		for _, c := range irCall.FindAllStringSubmatch(body, -1) {
			calls[name] = append(calls[name], c[1])
		}
	}
	for changed := true; changed; {
		changed = false
		for f, cs := range calls {
			if waits[f] {
				continue
			}
			for _, c := range cs {
				if waits[c] {
					waits[f], changed = true, true
					break
				}
			}
		}
	}
	var out []string
	for _, m := range irKernel.FindAllStringSubmatch(ir, -1) {
		if waits[m[1]] && !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	sort.Strings(out)
	return out
}

// TestDependentLaunchList: dependent_launch.txt is the list of the kernels
// whose device code reaches ft_pdl_wait, over every unit, as clang
// compiles them. FT_UPDATE_PDL=1 rewrites the file instead of failing.
// Skips without clang (.ci/run installs clang-14).
func TestDependentLaunchList(t *testing.T) {
	c := newClangCheck(t)
	var all []string
	for name, src := range kernelUnits(t) {
		for _, k := range c.pdlWaiters(t, name, src, unitFlags(name)...) {
			if !slices.Contains(all, k) {
				all = append(all, k)
			}
		}
	}
	sort.Strings(all)
	if len(all) == 0 {
		t.Fatal("no kernel reaches ft_pdl_wait: the IR reading is broken")
	}
	if os.Getenv("FT_UPDATE_PDL") == "1" {
		text := "# Kernels whose device code reaches ft_pdl_wait (kernels/cuda/pdl.go).\n" +
			"# Not edited by hand: FT_UPDATE_PDL=1 go test ./kernels/cuda -run TestDependentLaunchList\n" +
			strings.Join(all, "\n") + "\n"
		if err := os.WriteFile("dependent_launch.txt", []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("dependent_launch.txt: %d kernels", len(all))
		return
	}
	have := DependentLaunchKernels()
	var missing, extra []string
	for _, k := range all {
		if !WaitsForDependentLaunch(k) {
			missing = append(missing, k)
		}
	}
	for _, k := range have {
		if !slices.Contains(all, k) {
			extra = append(extra, k)
		}
	}
	if len(missing) > 0 || len(extra) > 0 {
		t.Errorf("dependent_launch.txt is stale: kernels that reach ft_pdl_wait and are not listed %v; listed and do not %v "+
			"(FT_UPDATE_PDL=1 go test ./kernels/cuda -run TestDependentLaunchList rewrites it)", missing, extra)
	}
}

// TestDependentLaunchListCatches: the IR reading finds a kernel that
// reaches ft_pdl_wait directly, one that reaches it through a device
// function that is not inlined, and not one that never does.
func TestDependentLaunchListCatches(t *testing.T) {
	c := newClangCheck(t)
	head, err := files.ReadFile("common.cuh")
	if err != nil {
		t.Fatal(err)
	}
	src := string(head) + `
__device__ __noinline__ void pdl_helper(int* y) { ft_pdl_wait(); *y = 1; }
extern "C" __global__ void pdl_direct(int* y) { ft_pdl_wait(); *y = 2; }
extern "C" __global__ void pdl_through(int* y) { pdl_helper(y); }
extern "C" __global__ void pdl_none(int* y) { *y = 3; }
`
	got := c.pdlWaiters(t, "catches", src)
	if want := []string{"pdl_direct", "pdl_through"}; !slices.Equal(got, want) {
		t.Errorf("kernels reaching ft_pdl_wait %v, want %v", got, want)
	}
}
