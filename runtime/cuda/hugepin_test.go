//go:build cuda

package cuda

import (
	"bytes"
	"testing"
	"time"
	"unsafe"

	"github.com/flextensor-go/flextensor/runtime/hostmem"
)

// TestAllocHostHugePages: a large pinned block (mapped and registered,
// allocRegistered) starts on a 2 MiB boundary, lies on transparent huge
// pages where the kernel's THP mode allows (at most one huge page short),
// and copies to the device and back at pinned speed with its bytes intact.
// It logs the allocation's time and its coverage. With FT_PINNED_HUGE=0
// only the copy is checked.
func TestAllocHostHugePages(t *testing.T) {
	d := open(t, Options{})
	const n = 64<<20 + 4096 // not a whole number of huge pages
	t0 := time.Now()
	h, err := d.AllocHost(n, "huge pinned")
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(t0)
	defer h.Free()
	p := uintptr(unsafe.Pointer(&h.Bytes()[0]))
	rss, huge, err := hostmem.Coverage([][]byte{h.Bytes()})
	t.Logf("AllocHost of %d bytes in %v at %#x; THP %q; AnonHugePages %d KiB of Rss %d KiB (%v); FT_PINNED_HUGE on: %v",
		n, took, p, hostmem.THPMode(), huge, rss, err, pinnedHuge)
	if pinnedHuge {
		if p%hostmem.HugePageSize != 0 {
			t.Fatalf("pinned block at %#x: not 2 MiB-aligned", p)
		}
		if m := hostmem.THPMode(); (m == "always" || m == "madvise") && err == nil && huge < (n-hostmem.HugePageSize)>>10 {
			t.Fatalf("AnonHugePages %d KiB of a %d KiB block: not on huge pages", huge, n>>10)
		}
	}
	for i := range h.Bytes() {
		h.Bytes()[i] = byte(i * 7)
	}
	a, err := d.Alloc(n, "a")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Free()
	back, err := d.AllocHost(n, "back")
	if err != nil {
		t.Fatal(err)
	}
	defer back.Free()
	c := d.Compute()
	t1 := time.Now()
	if err := c.CopyH2D(a, 0, h, 0, n); err != nil {
		t.Fatal(err)
	}
	if err := c.Synchronize(); err != nil {
		t.Fatal(err)
	}
	h2d := time.Since(t1)
	if err := c.CopyD2H(back, 0, a, 0, n); err != nil {
		t.Fatal(err)
	}
	if err := c.Synchronize(); err != nil {
		t.Fatal(err)
	}
	t.Logf("H2D of %d bytes: %v (%.1f GB/s)", n, h2d, float64(n)/h2d.Seconds()/1e9)
	if !bytes.Equal(back.Bytes(), h.Bytes()) {
		t.Fatal("the bytes did not come back")
	}
}
