//go:build cuda

package cuda

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/flextensor-go/flextensor/runtime"
)

func open(t *testing.T, o Options) *Device {
	t.Helper()
	d, err := OpenWith(0, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return d
}

func TestOpen(t *testing.T) {
	d := open(t, Options{})
	t.Logf("%s: %s, cc %d, %d SMs, %s, driver %d", d.Name(), d.Model(), d.ComputeCapability(), d.Multiprocessors(),
		runtime.FormatBytes(d.TotalMemory()), d.DriverVersion())
	if d.Name() != "cuda:0" || d.Kind() != runtime.KindCUDA || d.TotalMemory() <= 0 {
		t.Fatalf("device %s kind %v total %d", d.Name(), d.Kind(), d.TotalMemory())
	}
	if _, err := Open(1 << 20); err == nil || !strings.Contains(err.Error(), "no such device") {
		t.Fatalf("Open(1<<20) = %v, want no such device", err)
	}
}

// TestOutOfMemory: the limit and the card both give errors naming the
// allocation and its size that wrap runtime.ErrOutOfMemory.
func TestOutOfMemory(t *testing.T) {
	d := open(t, Options{MemoryLimit: 1 << 20})
	a, err := d.Alloc(512<<10, "first half")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Free()
	_, err = d.Alloc(1<<20, "too much for the limit")
	if !errors.Is(err, runtime.ErrOutOfMemory) || !strings.Contains(err.Error(), `"too much for the limit"`) || !strings.Contains(err.Error(), "1.00 MiB") {
		t.Fatalf("over the limit: %v", err)
	}
	d.SetMemoryLimit(0)
	_, err = d.Alloc(256<<30, "more than the card")
	if !errors.Is(err, runtime.ErrOutOfMemory) || !strings.Contains(err.Error(), `"more than the card"`) || !strings.Contains(err.Error(), "256.00 GiB") {
		t.Fatalf("over the card: %v", err)
	}
	t.Log(err)
	if m := d.Memory(); m.InUse != 512<<10 || m.Count != 1 {
		t.Fatalf("accounting after failures: %+v", m)
	}
}

// TestCopies: pinned H2D on a copy stream, an event orders the compute
// stream after it, D2D, D2H; the bytes come back.
func TestCopies(t *testing.T) {
	d := open(t, Options{})
	const n = 8 << 20
	src, err := d.AllocHost(n, "src")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Free()
	dst, err := d.AllocHost(n, "dst")
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Free()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(rng.Uint32())
	}
	for i := range dst.Bytes() {
		dst.Bytes()[i] = 0xAB
	}
	a, _ := d.Alloc(n, "a")
	defer a.Free()
	b, _ := d.Alloc(n, "b")
	defer b.Free()
	cs, err := d.NewStream("copy")
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if err := cs.CopyH2D(a, 0, src, 0, n); err != nil {
		t.Fatal(err)
	}
	ev, err := cs.Record()
	if err != nil {
		t.Fatal(err)
	}
	c := d.Compute()
	if err := c.Wait(ev); err != nil {
		t.Fatal(err)
	}
	if err := c.CopyD2D(b, 0, a, 0, n); err != nil {
		t.Fatal(err)
	}
	if err := c.CopyD2H(dst, 0, b, 0, n); err != nil {
		t.Fatal(err)
	}
	if err := c.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(src.Bytes(), dst.Bytes()) {
		t.Fatal("bytes differ after H2D, D2D, D2H")
	}
	if err := c.CopyH2D(a, n-4, src, 0, 8); err == nil {
		t.Fatal("copy past the end succeeded")
	}
	cpuHost, _ := runtime.NewCPU(0).AllocHost(16, "pageable")
	if err := c.CopyH2D(a, 0, cpuHost, 0, 16); err == nil || !strings.Contains(err.Error(), "pinned") {
		t.Fatalf("copy from another device's host memory: %v", err)
	}
	cpuHost.Free()
}

// TestEventTiming: events complete in order and time the work between them.
func TestEventTiming(t *testing.T) {
	d := open(t, Options{})
	s := d.ComputeStream()
	buf, _ := d.Alloc(1<<30, "timed")
	defer buf.Free()
	start, err := s.Record()
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if err := s.MemsetD32(buf.Ptr(), 7, 1<<28); err != nil {
			t.Fatal(err)
		}
	}
	end, _ := s.Record()
	if err := end.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if !start.Done() || !end.Done() {
		t.Fatal("events not done after Synchronize")
	}
	el, err := end.ElapsedSince(start)
	if err != nil {
		t.Fatal(err)
	}
	gbps := 20 * float64(1<<30) / el.Seconds() / 1e9
	t.Logf("20 memsets of 1 GiB: %v (%.0f GB/s)", el, gbps)
	if el <= 0 || gbps > 20000 {
		t.Fatalf("elapsed %v: not a timing of the work", el)
	}
}

const testKernels = `
extern "C" __global__ void add_one(int* x, int n) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) x[i] += 1;
}
`

// TestModuleLaunchGraph compiles a kernel with NVRTC, launches it, and
// replays a captured graph of three launches.
func TestModuleLaunchGraph(t *testing.T) {
	d := open(t, Options{})
	m, err := d.LoadModule("test.cu", testKernels)
	if err != nil {
		t.Fatal(err)
	}
	f, err := m.Function("add_one")
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	buf, _ := d.Alloc(4*n, "ints")
	defer buf.Free()
	s := d.ComputeStream()
	if err := s.MemsetD32(buf.Ptr(), 5, n); err != nil {
		t.Fatal(err)
	}
	launch := func() error {
		return f.Launch(s, Dim3{X: (n + 255) / 256}, Dim3{X: 256}, 0, Ptr(buf.Ptr()), I32(n))
	}
	if err := launch(); err != nil {
		t.Fatal(err)
	}
	g, err := s.Capture(func() error {
		for range 3 {
			if err := launch(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Destroy()
	if g.Nodes() != 3 {
		t.Errorf("graph has %d nodes, want 3", g.Nodes())
	}
	for range 2 {
		if err := g.Launch(s); err != nil {
			t.Fatal(err)
		}
	}
	out := make([]byte, 4*n)
	if err := s.Download(out, buf.Ptr()); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if v := int32(uint32(out[4*i]) | uint32(out[4*i+1])<<8 | uint32(out[4*i+2])<<16 | uint32(out[4*i+3])<<24); v != 12 {
			t.Fatalf("x[%d] = %d, want 5+1+2·3 = 12", i, v)
		}
	}
	if _, err := d.LoadModule("bad.cu", "extern \"C\" __global__ void k() { undeclared_thing(); }"); err == nil ||
		!strings.Contains(err.Error(), "undeclared_thing") {
		t.Fatalf("compile error: %v, want NVRTC's log naming the identifier", err)
	}
}

func TestCloseReportsLeaks(t *testing.T) {
	d, err := Open(0)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := d.Alloc(1<<20, "leaked")
	err = d.Close()
	if err == nil || !strings.Contains(err.Error(), "still held") {
		t.Fatalf("Close with a live buffer: %v", err)
	}
	b.Free()
}

// TestClosedDeviceErrDeviceClosed: after Close (with buffers still held,
// so the context stays), allocations, a new stream and copies on the
// device's streams are errors wrapping runtime.ErrDeviceClosed that name
// what was asked, not calls on destroyed streams.
func TestClosedDeviceErrDeviceClosed(t *testing.T) {
	d, err := Open(0)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := d.Alloc(64, "dst")
	if err != nil {
		t.Fatal(err)
	}
	src, err := d.Alloc(64, "src")
	if err != nil {
		t.Fatal(err)
	}
	pin, err := d.AllocHost(64, "pin")
	if err != nil {
		t.Fatal(err)
	}
	s := d.ComputeStream()
	if err := d.Close(); err == nil || !strings.Contains(err.Error(), "still held") {
		t.Fatalf("Close with live buffers: %v", err)
	}
	defer func() {
		dst.Free()
		src.Free()
		pin.Free()
	}()
	closed := func(what, name string, err error) {
		t.Helper()
		if !errors.Is(err, runtime.ErrDeviceClosed) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s after Close: %v; want runtime.ErrDeviceClosed naming %q", what, err, name)
		}
	}
	_, err = d.Alloc(16, "late")
	closed("Alloc", "late", err)
	_, err = d.AllocHost(16, "late pinned")
	closed("AllocHost", "late pinned", err)
	_, _, err = d.AllocMapped(16, "late mapped")
	closed("AllocMapped", "late mapped", err)
	_, err = d.NewStream("late stream")
	closed("NewStream", "late stream", err)
	closed("CopyH2D", "H2D copy", s.CopyH2D(dst, 0, pin, 0, 64))
	closed("CopyD2H", "D2H copy", s.CopyD2H(pin, 0, src, 0, 64))
	closed("CopyD2D", "D2D copy", s.CopyD2D(dst, 0, src, 0, 64))
	closed("Upload", "upload", s.Upload(dst.Ptr(), make([]byte, 8)))
	closed("Download", "download", s.Download(make([]byte, 8), src.Ptr()))
	closed("MemsetD32", "memset", s.MemsetD32(dst.Ptr(), 1, 4))
	closed("MemsetD16", "memset", s.MemsetD16(dst.Ptr(), 1, 4))
	_, err = s.RecordEvent()
	closed("RecordEvent", "event", err)
	closed("Synchronize", "synchronize", s.Synchronize())
}
