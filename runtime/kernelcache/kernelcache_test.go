package kernelcache

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func testKey() Key {
	return Key{Name: "k.cu", Source: "extern \"C\" __global__ void f() {}", Options: []string{"--gpu-architecture=sm_90", "--std=c++17"},
		Arch: 90, Driver: 13000, NVRTCMajor: 13, NVRTCMinor: 0}
}

// Every part of the key changes the hash, and option boundaries count.
func TestKeyParts(t *testing.T) {
	base := testKey()
	variants := map[string]Key{}
	k := base
	k.Source += " "
	variants["source"] = k
	k = base
	k.Options = []string{"--gpu-architecture=sm_90", "--std=c++20"}
	variants["options"] = k
	k = base
	k.Options = []string{"--gpu-architecture=sm_90--std=c++17"}
	variants["option boundaries"] = k
	k = base
	k.Options = append([]string{}, base.Options...)
	k.Options = append(k.Options, "-lineinfo")
	variants["one more option"] = k
	k = base
	k.Arch = 80
	variants["arch"] = k
	k = base
	k.Driver = 12080
	variants["driver"] = k
	k = base
	k.NVRTCMinor = 1
	variants["nvrtc"] = k
	seen := map[string]string{base.FileName(): "base"}
	for what, v := range variants {
		if prev, ok := seen[v.FileName()]; ok {
			t.Errorf("changing the %s gives the file name of %s", what, prev)
		}
		seen[v.FileName()] = what
	}
	k = base
	k.Name = "other.cu"
	if k.Sum() != base.Sum() {
		t.Error("the name (for messages only) changes the key")
	}
	if !strings.HasPrefix(base.FileName(), "sm90-") {
		t.Errorf("file name %q does not start with the architecture", base.FileName())
	}
}

func TestPutGet(t *testing.T) {
	c := &Cache{Dir: filepath.Join(t.TempDir(), "a", "b")} // made on Put
	k := testKey()
	if _, err := c.Get(k); !errors.Is(err, ErrMiss) {
		t.Fatalf("empty cache: %v, want ErrMiss", err)
	}
	image := bytes.Repeat([]byte{0x7f, 'E', 'L', 'F', 1, 2, 3}, 1000)
	if err := c.Put(k, image); err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(k)
	if err != nil || !bytes.Equal(got, image) {
		t.Fatalf("Get after Put: %d bytes, %v", len(got), err)
	}
	other := k
	other.Arch = 80
	if _, err := c.Get(other); !errors.Is(err, ErrMiss) {
		t.Fatalf("another arch: %v, want a miss", err)
	}
	entries, _ := os.ReadDir(c.Dir)
	if len(entries) != 1 || entries[0].Name() != k.FileName() {
		t.Errorf("cache directory holds %v, want only %s (no temporary files)", entries, k.FileName())
	}
}

// A damaged entry is a miss naming what is wrong, is removed, and Load then
// compiles and rewrites it.
func TestCorruptEntries(t *testing.T) {
	k := testKey()
	image := []byte("cubin image bytes")
	good := encode(k, image)
	other := k
	other.Source = "something else"
	damage := map[string][]byte{
		"empty":      {},
		"truncated":  good[:len(good)-3],
		"header cut": good[:20],
		"extended":   append(append([]byte{}, good...), 0),
		"bit flip":   func() []byte { b := append([]byte{}, good...); b[len(b)-1] ^= 1; return b }(),
		"bad magic":  func() []byte { b := append([]byte{}, good...); b[0] = 'X'; return b }(),
		"other key":  encode(other, image),
		"length lie": func() []byte { b := append([]byte{}, good...); b[len(magic)+32] = 99; return b }(),
	}
	for what, data := range damage {
		t.Run(what, func(t *testing.T) {
			c := &Cache{Dir: t.TempDir()}
			path := filepath.Join(c.Dir, k.FileName())
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := c.Get(k)
			var miss *MissError
			if !errors.Is(err, ErrMiss) || !errors.As(err, &miss) || len(miss.Problems) != 1 || !strings.Contains(err.Error(), "removed") {
				t.Fatalf("Get = %v; want a miss naming the problem", err)
			}
			if _, err := os.Stat(path); !os.IsNotExist(err) {
				t.Fatalf("the corrupt entry is still there (%v)", err)
			}
			os.WriteFile(path, data, 0o644)
			var warned []error
			compiles := 0
			got, hit, err := c.Load(k, func() ([]byte, error) { compiles++; return image, nil }, func(e error) { warned = append(warned, e) })
			if err != nil || hit || compiles != 1 || !bytes.Equal(got, image) || len(warned) != 1 {
				t.Fatalf("Load = %q, hit %v, %v; %d compiles, warnings %v", got, hit, err, compiles, warned)
			}
			if got, err := c.Get(k); err != nil || !bytes.Equal(got, image) {
				t.Fatalf("after Load the entry is %q, %v", got, err)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	c := &Cache{Dir: t.TempDir()}
	k := testKey()
	compiles := 0
	compile := func() ([]byte, error) { compiles++; return []byte(fmt.Sprintf("image %d", compiles)), nil }
	var warned []error
	warn := func(e error) { warned = append(warned, e) }
	img, hit, err := c.Load(k, compile, warn)
	if err != nil || hit || string(img) != "image 1" {
		t.Fatalf("first Load: %q, %v, %v", img, hit, err)
	}
	img, hit, err = c.Load(k, compile, warn)
	if err != nil || !hit || string(img) != "image 1" || compiles != 1 {
		t.Fatalf("second Load: %q, hit %v, %v, %d compiles", img, hit, err, compiles)
	}
	if len(warned) != 0 {
		t.Errorf("warnings on a clean miss and hit: %v", warned)
	}
	bad := errors.New("nvrtc: syntax error")
	k2 := k
	k2.Source = "broken"
	if _, _, err := c.Load(k2, func() ([]byte, error) { return nil, bad }, warn); !errors.Is(err, bad) {
		t.Fatalf("compile error: %v", err)
	}
	if _, err := c.Get(k2); !errors.Is(err, ErrMiss) {
		t.Fatal("a failed compile left an entry")
	}
}

// An unwritable cache directory: the image still comes back, the failed
// write is a warning.
func TestLoadUnwritable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "not-a-dir")
	os.WriteFile(file, nil, 0o644)
	c := &Cache{Dir: filepath.Join(file, "kernels")}
	var warned []error
	img, hit, err := c.Load(testKey(), func() ([]byte, error) { return []byte("x"), nil }, func(e error) { warned = append(warned, e) })
	if err != nil || hit || string(img) != "x" || len(warned) == 0 || !strings.Contains(warned[len(warned)-1].Error(), "kernel cache: mkdir") {
		t.Fatalf("Load = %q, %v, %v, warnings %v", img, hit, err, warned)
	}
}

// Read-only directories (kernels built ahead of time) are searched after
// Dir, never written, and a corrupt file there is skipped, not removed.
func TestReadOnly(t *testing.T) {
	pre, dir := t.TempDir(), t.TempDir()
	k := testKey()
	if err := (&Cache{Dir: pre}).Put(k, []byte("prebuilt")); err != nil {
		t.Fatal(err)
	}
	c := &Cache{Dir: dir, ReadOnly: []string{filepath.Join(t.TempDir(), "absent"), pre}}
	img, hit, err := c.Load(k, func() ([]byte, error) { t.Fatal("compiled although prebuilt"); return nil, nil }, nil)
	if err != nil || !hit || string(img) != "prebuilt" {
		t.Fatalf("Load = %q, %v, %v", img, hit, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("a read-only hit wrote %v", entries)
	}
	path := filepath.Join(pre, k.FileName())
	os.WriteFile(path, []byte("garbage"), 0o644)
	if _, err := c.Get(k); !errors.Is(err, ErrMiss) || !strings.Contains(err.Error(), "skipped") {
		t.Fatalf("corrupt prebuilt: %v", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("the read-only file was removed: %v", err)
	}
	// The zero cache and a nil one hold nothing and write nothing.
	for _, z := range []*Cache{{}, nil} {
		if _, err := z.Get(k); !errors.Is(err, ErrMiss) {
			t.Errorf("%v: Get = %v", z, err)
		}
		if err := z.Put(k, []byte("x")); err != nil {
			t.Errorf("%v: Put = %v", z, err)
		}
	}
}

// Writers racing on one key leave one whole entry.
func TestConcurrentPut(t *testing.T) {
	c := &Cache{Dir: t.TempDir()}
	k := testKey()
	image := bytes.Repeat([]byte("0123456789abcdef"), 1<<14)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Put(k, image); err != nil {
				t.Error(err)
			}
			if got, err := c.Get(k); err != nil || !bytes.Equal(got, image) {
				t.Errorf("Get during puts: %d bytes, %v", len(got), err)
			}
		}()
	}
	wg.Wait()
	entries, _ := os.ReadDir(c.Dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d files, want 1", len(entries))
	}
}

func TestDefault(t *testing.T) {
	t.Setenv(EnvVar, "/some/where")
	c := Default()
	if c.Dir != "/some/where" {
		t.Errorf("FT_KERNEL_CACHE: Dir %q", c.Dir)
	}
	exe, _ := os.Executable()
	if len(c.ReadOnly) != 1 || c.ReadOnly[0] != filepath.Join(filepath.Dir(exe), "kernels") {
		t.Errorf("read-only directories %v, want the executable's kernels directory", c.ReadOnly)
	}
	t.Setenv(EnvVar, "off")
	if c := Default(); c.Dir != "" || len(c.ReadOnly) != 0 {
		t.Errorf("off: %+v", c)
	}
	t.Setenv(EnvVar, "")
	t.Setenv("XDG_CACHE_HOME", "/xdg")
	if c := Default(); c.Dir != "/xdg/flextensor/kernels" {
		t.Errorf("user cache dir: %q", c.Dir)
	}
}
