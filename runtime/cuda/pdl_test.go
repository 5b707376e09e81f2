//go:build cuda

package cuda

import (
	"encoding/binary"
	"testing"
)

const pdlTestKernels = `
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.wait;" ::: "memory");
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// slow_inc: y[i] = x[i] + 1, written only after spin clock cycles, so a
// dependent kernel that read y before this one completed would see the old
// value.
extern "C" __global__ void slow_inc(int* y, const int* x, int n, long long spin) {
	pdl_wait();
	const long long t0 = clock64();
	while (clock64() - t0 < spin) {}
	const int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) y[i] = x[i] + 1;
}
`

// TestDependentLaunchChain launches a chain of kernels that each read the
// previous one's output with programmatic dependent launch on (sm_90), both
// eagerly and replayed from a captured graph: the griddepcontrol.wait makes
// every link see the finished value.
func TestDependentLaunchChain(t *testing.T) {
	d := open(t, Options{})
	on := d.SetDependentLaunch(true)
	t.Logf("cc %d, driver %d: dependent launch %v", d.ComputeCapability(), d.DriverVersion(), on)
	if d.ComputeCapability() >= 90 && d.DriverVersion() >= 12030 && !on {
		t.Fatal("sm_90 with a CUDA 12.3+ driver: dependent launch should be available (cuLaunchKernelEx not found?)")
	}
	m, err := d.LoadModule("pdltest.cu", pdlTestKernels)
	if err != nil {
		t.Fatal(err)
	}
	f, err := m.Function("slow_inc")
	if err != nil {
		t.Fatal(err)
	}
	if f.DependentLaunch() {
		t.Fatal("a kernel allows dependent launch before it says so")
	}
	f.SetDependentLaunch(true)
	const n, links = 4096, 12
	a, _ := d.Alloc(4*n, "a")
	defer a.Free()
	b, _ := d.Alloc(4*n, "b")
	defer b.Free()
	s := d.ComputeStream()
	chain := func() error {
		for i := range links {
			src, dst := a, b
			if i%2 == 1 {
				src, dst = b, a
			}
			// Long spins on odd links, short on even: a link that read early
			// would read a stale value.
			spin := int64(2000)
			if i%2 == 1 {
				spin = 200000
			}
			if err := f.Launch(s, Dim3{X: n / 128}, Dim3{X: 128}, 0, Ptr(dst.Ptr()), Ptr(src.Ptr()), I32(n), I64(spin)); err != nil {
				return err
			}
		}
		return nil
	}
	check := func(what string, want int32) {
		t.Helper()
		out := make([]byte, 4*n)
		if err := s.Download(out, a.Ptr()); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if v := int32(binary.LittleEndian.Uint32(out[4*i:])); v != want {
				t.Fatalf("%s: a[%d] = %d, want %d", what, i, v, want)
			}
		}
	}
	for _, pdl := range []bool{true, false} {
		d.SetDependentLaunch(pdl)
		if err := s.MemsetD32(a.Ptr(), 7, n); err != nil {
			t.Fatal(err)
		}
		if err := chain(); err != nil {
			t.Fatal(err)
		}
		check("eager", 7+links)
		g, err := s.Capture(chain)
		if err != nil {
			t.Fatalf("capturing with dependent launch %v: %v", pdl, err)
		}
		for range 3 {
			if err := g.Launch(s); err != nil {
				t.Fatal(err)
			}
		}
		check("graph", 7+4*links)
		if err := g.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDependentLaunchEnv: FT_PDL=0 leaves dependent launch off.
func TestDependentLaunchEnv(t *testing.T) {
	t.Setenv("FT_PDL", "0")
	d := open(t, Options{})
	if d.DependentLaunch() {
		t.Fatal("FT_PDL=0: dependent launch on")
	}
}
