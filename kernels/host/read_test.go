package host

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"

	"github.com/flextensor-go/flextensor/runtime/hostmem"
)

func TestReadSum(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, e := range engines(t) {
		for _, n := range []int{0, 1, 15, 63, 64, 65, 1000, readChunk + 7, 3*readChunk + 100} {
			v := make([]float32, n)
			var want float64
			for i := range v {
				v[i] = float32(r.IntN(17) - 8) // small integers: every order sums exactly
				want += float64(v[i])
			}
			if got := e.ReadSum(v); float64(got) != want {
				t.Fatalf("%v/%d threads: ReadSum of %d values = %v, want %v", e.Level(), e.Threads(), n, got, want)
			}
		}
	}
}

func TestReadBandwidth(t *testing.T) {
	e, err := NewEngine(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	gbs, err := e.ReadBandwidth(1<<20, 2)
	if err != nil || !(gbs > 0) {
		t.Fatalf("ReadBandwidth = %v, %v", gbs, err)
	}
	if _, err := e.ReadBandwidth(0, 1); err == nil {
		t.Error("0 bytes: no error")
	}
}

// TestReadBandwidthPinnedHuge: the probe maps its buffer as the pinned
// weight blocks are, huge unless FT_PINNED_HUGE=0 (hostmem.PinnedHuge).
func TestReadBandwidthPinnedHuge(t *testing.T) {
	e, err := NewEngine(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	saved := mapProbe
	defer func() { mapProbe = saved }()
	var got []bool
	mapProbe = func(n int64, o hostmem.Options) (*hostmem.Block, error) {
		got = append(got, o.Huge)
		return hostmem.Map(n, o)
	}
	for _, c := range []struct {
		env  string
		huge bool
	}{{"0", false}, {"1", true}, {"", true}} {
		t.Setenv("FT_PINNED_HUGE", c.env)
		got = nil
		if _, err := e.ReadBandwidth(1<<20, 1); err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0] != c.huge {
			t.Errorf("FT_PINNED_HUGE=%q: probe mapped with Huge %v, want [%v]", c.env, got, c.huge)
		}
	}
}

// TestMapReadBuffer: the buffer is bytes rounded down to float32s, over the
// block's own memory, filled with i&1023 (a value past 1023 wraps); fewer
// than 4 bytes is an error.
func TestMapReadBuffer(t *testing.T) {
	e, err := NewEngine(Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	blk, buf, err := e.MapReadBuffer(3<<20 + 6) // not a whole number of readChunks, nor of float32s
	if err != nil {
		t.Fatal(err)
	}
	defer blk.Free()
	if len(buf) != (3<<20+4)/4 {
		t.Fatalf("%d values, want %d", len(buf), (3<<20+4)/4)
	}
	if &blk.Bytes()[0] != (*byte)(unsafe.Pointer(&buf[0])) {
		t.Fatal("buffer is not the block's memory")
	}
	for i, v := range buf {
		if v != float32(i&1023) {
			t.Fatalf("buf[%d] = %v, want %d", i, v, i&1023)
		}
	}
	if _, _, err := e.MapReadBuffer(3); err == nil || !strings.Contains(err.Error(), "3 bytes") {
		t.Errorf("3 bytes: %v, want an error naming the size", err)
	}
}
