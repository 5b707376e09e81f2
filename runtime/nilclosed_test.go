package runtime

import (
	"errors"
	"strings"
	"testing"
)

// TestNilDeviceAndBuffer: a tensor on a nil device or over a nil buffer is
// an error naming it, not a panic.
func TestNilDeviceAndBuffer(t *testing.T) {
	if _, err := NewTensor(nil, F32, Shape{2}, "x"); err == nil || !strings.Contains(err.Error(), "nil device") || !strings.Contains(err.Error(), `"x"`) {
		t.Errorf("NewTensor(nil, ...): %v", err)
	}
	if _, err := TensorOn(nil, 0, F32, Shape{2}); err == nil || !strings.Contains(err.Error(), "nil buffer") {
		t.Errorf("TensorOn(nil, ...): %v", err)
	}
}

// TestClosedCPUDeviceRefusesAllocations: after Close, Alloc, Wrap,
// AllocHost and NewTensor fail naming the allocation; buffers taken before
// Close can still be freed.
func TestClosedCPUDeviceRefusesAllocations(t *testing.T) {
	d := NewCPU(0)
	before, err := d.Alloc(16, "before")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err == nil {
		t.Error("Close with 16 bytes held: no error")
	}
	before.Free()
	if m := d.Memory(); m.InUse != 0 {
		t.Errorf("after freeing the buffer taken before Close: %d bytes in use", m.InUse)
	}
	if _, err := d.Alloc(16, "a"); err == nil || !errors.Is(err, ErrDeviceClosed) || !strings.Contains(err.Error(), `"a"`) {
		t.Errorf("Alloc after Close: %v", err)
	}
	if _, err := d.Wrap(make([]byte, 8), "w"); err == nil || !errors.Is(err, ErrDeviceClosed) || !strings.Contains(err.Error(), `"w"`) {
		t.Errorf("Wrap after Close: %v", err)
	}
	if _, err := d.AllocHost(8, "h"); err == nil || !errors.Is(err, ErrDeviceClosed) || !strings.Contains(err.Error(), `"h"`) {
		t.Errorf("AllocHost after Close: %v", err)
	}
	if _, err := NewTensor(d, F32, Shape{4}, "t"); err == nil || !errors.Is(err, ErrDeviceClosed) {
		t.Errorf("NewTensor after Close: %v", err)
	}
	if m := d.Memory(); m.InUse != 0 || m.Count != 0 {
		t.Errorf("refused allocations were accounted: %+v", m)
	}
}
