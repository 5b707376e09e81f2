//go:build cuda

package cudabackend

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/kernels/exp4"
)

// exp4Words is n BF16 words: values uniform in ±scale (make-model's
// weights), with every 997th word zero and every 1,009th an outlier,
// or with raw random bits (escapes everywhere).
func exp4Words(t *testing.T, n int, raw bool) []byte {
	rng := newRNG(t)
	out := make([]byte, 2*n)
	for i := 0; i < n; i++ {
		var w uint16
		switch {
		case raw:
			w = uint16(rng.Uint32())
		case i%997 == 0:
		default:
			v := (rng.Float64()*2 - 1) * 0.03
			if i%1009 == 0 {
				v *= 500
			}
			b := math.Float32bits(float32(v))
			w = uint16((b + 0x7FFF + (b >> 16 & 1)) >> 16)
		}
		binary.LittleEndian.PutUint16(out[2*i:], w)
	}
	return out
}

// unpackOnGPU packs src on the host, unpacks it with UnpackExp4 on a
// stream of its own, and returns the words and the unpack's time.
func unpackOnGPU(t *testing.T, src []byte) ([]byte, time.Duration, exp4.Layout) {
	t.Helper()
	size, err := exp4.PackedSize(src)
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, size)
	if _, err := exp4.Pack(p, src); err != nil {
		t.Fatal(err)
	}
	l, err := exp4.ReadLayout(p)
	if err != nil {
		t.Fatal(err)
	}
	dsrc, err := gdev.Alloc(max(size, 16), "exp4 packed")
	if err != nil {
		t.Fatal(err)
	}
	defer dsrc.Free()
	ddst, err := gdev.Alloc(max(int64(len(src)), 16), "exp4 words")
	if err != nil {
		t.Fatal(err)
	}
	defer ddst.Free()
	if err := gb.s.Upload(dsrc.Ptr(), p); err != nil {
		t.Fatal(err)
	}
	s, err := gdev.NewStream("exp4 test")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	e0, err := s.Record()
	if err != nil {
		t.Fatal(err)
	}
	if err := gb.UnpackExp4(s, ddst, dsrc, 0, l); err != nil {
		t.Fatal(err)
	}
	e1, err := s.Record()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	d, err := e1.ElapsedSince(e0)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, len(src))
	if len(out) > 0 {
		if err := gb.s.Download(out, ddst.Ptr()); err != nil {
			t.Fatal(err)
		}
	}
	return out, d, l
}

// TestUnpackExp4GPU: exp4_unpack gives the words back bit for bit, as the
// reference does: whole and partial chunks, a partial 16-word group, words
// with zeros and outliers (escapes), raw random bits (escapes in every
// chunk, some past the window on both sides); a packed buffer too small
// for its layout is an error.
func TestUnpackExp4GPU(t *testing.T) {
	needGPU(t)
	for _, c := range []struct {
		n   int
		raw bool
	}{{1, false}, {15, false}, {16, false}, {4095, false}, {4096, false}, {4097 + 4096*5, false}, {100003, false}, {3*4096 + 5, true}} {
		src := exp4Words(t, c.n, c.raw)
		got, _, l := unpackOnGPU(t, src)
		if !bytes.Equal(got, src) {
			for i := 0; i < c.n; i++ {
				if g, w := binary.LittleEndian.Uint16(got[2*i:]), binary.LittleEndian.Uint16(src[2*i:]); g != w {
					t.Fatalf("%d words (raw %v, %d escapes): word %d is %#04x, want %#04x", c.n, c.raw, l.Escapes, i, g, w)
				}
			}
		}
	}
	small, err := gdev.Alloc(64, "small")
	if err != nil {
		t.Fatal(err)
	}
	defer small.Free()
	if err := gb.UnpackExp4(gdev.Compute(), small, small, 0, exp4.Layout{Words: 10, Size: 128}); err == nil {
		t.Error("a 64-byte buffer for a 128-byte layout: no error")
	}
}

// TestUnpackExp4Rate: one Llama-3-8B layer's 218 M words (436 MB of BF16
// weights as make-model writes them) unpacked from 327 MB: the time and
// the rate over the bytes read and written (logged; the offload engine
// unpacks on the copy stream, beside the forward).
func TestUnpackExp4Rate(t *testing.T) {
	needGPU(t)
	const n = 218_112_000
	src := exp4Words(t, n, false)
	var best time.Duration
	var l exp4.Layout
	for i := 0; i < 3; i++ {
		got, d, li := unpackOnGPU(t, src)
		if i == 0 && !bytes.Equal(got, src) {
			t.Fatal("the layer's words do not come back")
		}
		if best == 0 || d < best {
			best, l = d, li
		}
	}
	gbps := float64(l.Size+2*l.Words) / best.Seconds() / 1e9
	t.Logf("exp4: %d words, packed %.1f MB of %.1f (%.4f; %d escapes); unpacked in %.3f ms, %.0f GB/s read + written",
		l.Words, float64(l.Size)/1e6, float64(2*l.Words)/1e6, float64(l.Size)/float64(2*l.Words), l.Escapes, best.Seconds()*1e3, gbps)
}

var _ kernels.Exp4Unpacker = (*kernels.CPUBackend)(nil)
