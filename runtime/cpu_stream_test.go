package runtime

import (
	"errors"
	"strings"
	"testing"
)

// TestCPUStreamsForgotten: a closed stream leaves the device's list, so
// making and closing streams over and over (an offload engine per cycle)
// does not grow the device; Close of the device still stops open ones.
func TestCPUStreamsForgotten(t *testing.T) {
	d := NewCPU(0)
	for i := 0; i < 100; i++ {
		s, err := d.NewStream("cycle")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	open, err := d.NewStream("open")
	if err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	n := len(d.streams)
	d.mu.Unlock()
	if n != 1 {
		t.Fatalf("device lists %d streams, want the 1 still open", n)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := open.Record(); err == nil {
		t.Fatal("a stream still works after its device was closed")
	}
}

// TestCPUAtClose: Close runs the registered functions last registered
// first, before it checks for memory still held (a function may free
// what it holds), and returns their errors among its own.
func TestCPUAtClose(t *testing.T) {
	d := NewCPU(0)
	buf, err := d.Alloc(64, "held by a hook's owner")
	if err != nil {
		t.Fatal(err)
	}
	var order []int
	d.AtClose(func() error { order = append(order, 1); return errors.New("first registered failed") })
	d.AtClose(func() error { order = append(order, 2); buf.Free(); return nil })
	err = d.Close()
	if len(order) != 2 || order[0] != 2 || order[1] != 1 {
		t.Errorf("hooks ran in order %v, want [2 1]", order)
	}
	if err == nil || !strings.Contains(err.Error(), "first registered failed") || strings.Contains(err.Error(), "still held") {
		t.Errorf("Close = %v, want the hook's error and no memory still held", err)
	}
	if err := d.Close(); err != nil {
		t.Errorf("second Close = %v (the hooks ran once)", err)
	}
}
