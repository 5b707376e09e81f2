package exp4

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// bf16Normal is n BF16 words of N(0, σ) values with a few outliers and
// zeros, as trained weights look.
func bf16Normal(n int, sigma float64, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([]byte, 2*n)
	for i := 0; i < n; i++ {
		v := r.NormFloat64() * sigma
		switch r.IntN(5000) {
		case 0:
			v = 0
		case 1:
			v *= 300
		}
		b := math.Float32bits(float32(v))
		binary.LittleEndian.PutUint16(out[2*i:], uint16((b+0x7FFF+(b>>16&1))>>16))
	}
	return out
}

func roundTrip(t *testing.T, src []byte) Layout {
	t.Helper()
	size, err := PackedSize(src)
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, size+7) // room past the end stays unused
	got, err := Pack(p, src)
	if err != nil || got != size {
		t.Fatalf("Pack: %d bytes, %v; PackedSize said %d", got, err, size)
	}
	l, err := ReadLayout(p)
	if err != nil {
		t.Fatal(err)
	}
	dirty := bytes.Repeat([]byte{0xA5}, int(size)) // the same bytes whatever the buffer held
	if _, err := Pack(dirty, src); err != nil || !bytes.Equal(dirty, p[:size]) {
		t.Fatalf("packing into a used buffer: %v, or other bytes than into a fresh one", err)
	}
	dst := make([]byte, len(src))
	if err := Unpack(dst, p[:size]); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst, src) {
		for i := range src {
			if dst[i] != src[i] {
				t.Fatalf("%d bytes: first difference at byte %d (word %d): %#x, want %#x", len(src), i, i/2, dst[i], src[i])
			}
		}
	}
	return l
}

// TestRoundTrip: every input comes back bit for bit: BF16 weights of
// several sizes (whole chunks, a partial last chunk, one word, none),
// random bytes (every word an arbitrary exponent), all zeros, all
// escapes of one chunk.
func TestRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 2, 15, 16, 17, Chunk - 1, Chunk, Chunk + 1, 3*Chunk + 77, 100003} {
		l := roundTrip(t, bf16Normal(n, 0.02, uint64(n)))
		if l.Words != int64(n) {
			t.Fatalf("%d words packed as %d", n, l.Words)
		}
	}
	r := rand.New(rand.NewPCG(7, 7))
	random := make([]byte, 2*(2*Chunk+9))
	for i := range random {
		random[i] = byte(r.Uint32())
	}
	if l := roundTrip(t, random); l.Escapes < l.Words/2 {
		t.Errorf("random words: %d escapes of %d, want most of them", l.Escapes, l.Words)
	}
	roundTrip(t, make([]byte, 2*Chunk+2))
	spread := make([]byte, 2*Chunk) // exponents 0..255 over one chunk: 241 escapes at least
	for i := 0; i < Chunk; i++ {
		binary.LittleEndian.PutUint16(spread[2*i:], uint16(i%256)<<7|uint16(i&0x7F)|uint16(i&1)<<15)
	}
	if l := roundTrip(t, spread); l.Escapes < Chunk*241/256 {
		t.Errorf("one chunk over all 256 exponents: %d escapes, want ≥ %d", l.Escapes, Chunk*241/256)
	}
}

// TestRatio: BF16 weights pack to 0.75 of their bytes and a few escapes
// (one in 5,000 is a zero or an outlier here).
func TestRatio(t *testing.T) {
	src := bf16Normal(1<<20, 0.02, 3)
	l := roundTrip(t, src)
	ratio := float64(l.Size) / float64(len(src))
	if ratio < 0.75 || ratio > 0.752 {
		t.Fatalf("packed to %.4f of the bytes (%d escapes of %d words), want 0.750–0.752", ratio, l.Escapes, l.Words)
	}
}

// TestBadInput: an odd byte count, a buffer too small to pack into, and
// packed buffers that are not one (no header, another version, cut
// short, escapes out of their chunk) are errors naming what is wrong.
func TestBadInput(t *testing.T) {
	if _, err := PackedSize(make([]byte, 3)); err == nil || !strings.Contains(err.Error(), "16-bit words") {
		t.Errorf("odd bytes: %v", err)
	}
	src := bf16Normal(1000, 0.02, 1)
	size, _ := PackedSize(src)
	if _, err := Pack(make([]byte, size-1), src); err == nil || !strings.Contains(err.Error(), "need") {
		t.Errorf("short destination: %v", err)
	}
	p := make([]byte, size)
	if _, err := Pack(p, src); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, len(src))
	for _, c := range []struct {
		name string
		mod  func([]byte) []byte
		want string
	}{
		{"no header", func(b []byte) []byte { b[0] = 'X'; return b }, "no EXP4 header"},
		{"version", func(b []byte) []byte { b[4] = 9; return b }, "version 9"},
		{"cut short", func(b []byte) []byte { return b[:len(b)-16] }, "need"},
		{"escape range", func(b []byte) []byte {
			l, _ := ReadLayout(b)
			binary.LittleEndian.PutUint32(b[l.EscStart+4:], uint32(l.Escapes+1))
			return b
		}, "escapes"},
	} {
		b := c.mod(bytes.Clone(p))
		if err := Unpack(dst, b); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
	if err := Unpack(make([]byte, 10), p); err == nil || !strings.Contains(err.Error(), "holds 1000 words") {
		t.Errorf("short output: %v", err)
	}
}

// FuzzRoundTrip: any even-length input comes back bit for bit, and Unpack
// of any bytes returns an error or fills the output without panicking.
func FuzzRoundTrip(f *testing.F) {
	f.Add(bf16Normal(300, 0.02, 1))
	f.Add([]byte{0, 0, 0xFF, 0xFF})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b)%2 == 0 {
			roundTrip(t, b)
		}
		_ = Unpack(make([]byte, 64), b)
	})
}

// TestPackSized: packing with Measure's sizing gives Pack's bytes; a sizing
// of other words is an error.
func TestPackSized(t *testing.T) {
	src := bf16Normal(3*Chunk+5, 0.02, 4)
	sz, err := Measure(src)
	if err != nil {
		t.Fatal(err)
	}
	a, b := make([]byte, sz.Size), make([]byte, sz.Size)
	if _, err := Pack(a, src); err != nil {
		t.Fatal(err)
	}
	if n, err := PackSized(b, src, sz); err != nil || n != sz.Size || !bytes.Equal(a, b) {
		t.Fatalf("PackSized: %d bytes, %v, same as Pack: %v", n, err, bytes.Equal(a, b))
	}
	if _, err := PackSized(b, src[:len(src)-2], sz); err == nil || !strings.Contains(err.Error(), "sizing of") {
		t.Errorf("a sizing of other words: %v", err)
	}
}
