//go:build cuda

package cuda

import (
	"strings"
	"testing"
)

// TestTensorMapBF16: on compute capability 9.0 a map of a device matrix
// encodes (not all zero: the driver wrote it) and bad shapes are errors
// naming the problem; below 9.0 every call says maps need 9.0.
func TestTensorMapBF16(t *testing.T) {
	d := open(t, Options{})
	buf, err := d.Alloc(1<<20, "tensor map test")
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	p := buf.Ptr()
	if !d.TensorMapsSupported() {
		if _, err := d.TensorMapBF16(p, 1024, 512, 2048, 64, 128); err == nil || !strings.Contains(err.Error(), "9.0") {
			t.Fatalf("compute capability %d: %v, want an error naming 9.0", d.ComputeCapability(), err)
		}
		t.Skipf("compute capability %d: no tensor maps", d.ComputeCapability())
	}
	m, err := d.TensorMapBF16(p, 1024, 512, 2048, 64, 128)
	if err != nil {
		t.Fatal(err)
	}
	zero := true
	for _, w := range m.Slots() {
		zero = zero && w == 0
	}
	if zero || len(m.Slots()) != 16 {
		t.Errorf("map %v: want 16 slots the driver wrote", m.Slots())
	}
	for _, c := range []struct {
		name                         string
		ptr                          uintptr
		cols, rows, rowBytes, bc, br int
		want                         string
	}{
		{"misaligned address", p + 8, 1024, 512, 2048, 64, 128, "multiples of 16"},
		{"misaligned rows", p, 1000, 512, 2008, 64, 128, "multiples of 16"},
		{"rows overlap", p, 1024, 512, 1024, 64, 128, "bytes apart"},
		{"box too wide", p, 1024, 512, 2048, 128, 128, "box"},
		{"box too tall", p, 1024, 512, 2048, 64, 512, "box"},
	} {
		if _, err := d.TensorMapBF16(c.ptr, c.cols, c.rows, c.rowBytes, c.bc, c.br); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
}
