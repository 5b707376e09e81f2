//go:build cuda

package cuda

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/flextensor-go/flextensor/runtime/kernelcache"
)

// TestKernelCache: the first LoadModule compiles and writes the cache, the
// next loads from it and the kernel runs; a truncated entry and an image the
// driver refuses are compiled again and replaced.
func TestKernelCache(t *testing.T) {
	cache := &kernelcache.Cache{Dir: t.TempDir()}
	d := open(t, Options{KernelCache: cache})
	run := func(m *Module) {
		t.Helper()
		f, err := m.Function("add_one")
		if err != nil {
			t.Fatal(err)
		}
		const n = 256
		buf, _ := d.Alloc(4*n, "ints")
		defer buf.Free()
		s := d.ComputeStream()
		if err := s.MemsetD32(buf.Ptr(), 5, n); err != nil {
			t.Fatal(err)
		}
		if err := f.Launch(s, Dim3{X: 1}, Dim3{X: 256}, 0, Ptr(buf.Ptr()), I32(n)); err != nil {
			t.Fatal(err)
		}
		out := make([]byte, 4*n)
		if err := s.Download(out, buf.Ptr()); err != nil {
			t.Fatal(err)
		}
		if out[0] != 6 || out[4*(n-1)] != 6 {
			t.Fatalf("kernel wrote %d, %d; want 6", out[0], out[4*(n-1)])
		}
	}
	load := func(wantCached bool) {
		t.Helper()
		m, err := d.LoadModule("test.cu", testKernels)
		if err != nil {
			t.Fatal(err)
		}
		if m.Cached != wantCached {
			t.Fatalf("Cached = %v, want %v", m.Cached, wantCached)
		}
		run(m)
	}
	load(false)
	entries, err := os.ReadDir(cache.Dir)
	if err != nil || len(entries) != 1 {
		t.Fatalf("cache holds %v (%v), want one entry", entries, err)
	}
	path := filepath.Join(cache.Dir, entries[0].Name())
	load(true)

	data, _ := os.ReadFile(path)
	os.WriteFile(path, data[:len(data)/2], 0o644)
	load(false)
	load(true)

	// A well-formed entry holding an image the driver refuses.
	maj, min := nvrtcVersion()
	key := kernelcache.Key{Source: testKernels, Options: []string{"--gpu-architecture=sm_" + strconv.Itoa(d.cc), "--std=c++17", "-default-device"},
		Arch: d.cc, Driver: driverVersion(), NVRTCMajor: maj, NVRTCMinor: min}
	if key.FileName() != entries[0].Name() {
		t.Fatalf("key file %s, cache file %s: the test's key differs from LoadModule's", key.FileName(), entries[0].Name())
	}
	if err := cache.Put(key, []byte("not a cubin at all")); err != nil {
		t.Fatal(err)
	}
	load(false)
	load(true)
}
