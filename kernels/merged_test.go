package kernels

import (
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// TestAdjacent: views packed back to back in one buffer are adjacent; a gap,
// another order, another buffer, another column count or dtype are not.
func TestAdjacent(t *testing.T) {
	dev := runtime.NewCPU(0)
	defer dev.Close()
	buf, err := dev.Alloc(4096, "packed")
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	view := func(b *runtime.DeviceBuffer, off int64, dt runtime.DType, n, d int) *runtime.Tensor {
		v, err := runtime.TensorOn(b, off, dt, runtime.Shape{n, d})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	q := view(buf, 0, runtime.BF16, 8, 16)     // 256 bytes
	k := view(buf, 256, runtime.BF16, 4, 16)   // 128 bytes
	v := view(buf, 384, runtime.BF16, 4, 16)   // ends at 512
	gap := view(buf, 512, runtime.BF16, 4, 16) // after a gap behind k
	other, err := dev.Alloc(4096, "other")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Free()
	for _, c := range []struct {
		name string
		ws   []*runtime.Tensor
		want bool
	}{
		{"q,k,v", []*runtime.Tensor{q, k, v}, true},
		{"k,v", []*runtime.Tensor{k, v}, true},
		{"one", []*runtime.Tensor{q}, false},
		{"nil", []*runtime.Tensor{q, nil}, false},
		{"order", []*runtime.Tensor{q, v, k}, false},
		{"gap", []*runtime.Tensor{q, k, gap}, false},
		{"buffer", []*runtime.Tensor{q, view(other, 256, runtime.BF16, 4, 16)}, false},
		{"columns", []*runtime.Tensor{q, view(buf, 256, runtime.BF16, 8, 8)}, false},
		{"dtype", []*runtime.Tensor{q, view(buf, 256, runtime.F32, 2, 16)}, false},
	} {
		if got := Adjacent(c.ws); got != c.want {
			t.Errorf("%s: Adjacent = %v, want %v", c.name, got, c.want)
		}
	}
}
