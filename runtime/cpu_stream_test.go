package runtime

import "testing"

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
