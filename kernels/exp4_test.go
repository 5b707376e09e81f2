package kernels

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/flextensor-go/flextensor/kernels/exp4"
	"github.com/flextensor-go/flextensor/runtime"
)

// TestUnpackExp4CPU: the CPU backend's UnpackExp4 decodes in the order of
// the stream it is given: a copy of the packed bytes enqueued before it is
// what it reads, and the words come back bit for bit; buffers too small
// for the layout are errors.
func TestUnpackExp4CPU(t *testing.T) {
	dev := runtime.NewCPU(0)
	defer dev.Close()
	b, err := NewCPUBackend(dev)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	src := make([]byte, 2*(3*exp4.Chunk+11))
	for i := 0; i < len(src); i += 2 {
		src[i], src[i+1] = byte(r.Uint32()), 0x3C+byte(r.IntN(3)) // exponents near 120
	}
	size, err := exp4.PackedSize(src)
	if err != nil {
		t.Fatal(err)
	}
	host, err := dev.AllocHost(size, "packed")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Free()
	if _, err := exp4.Pack(host.Bytes(), src); err != nil {
		t.Fatal(err)
	}
	l, err := exp4.ReadLayout(host.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	packed, err := dev.Alloc(size, "packed on the device")
	if err != nil {
		t.Fatal(err)
	}
	defer packed.Free()
	words, err := dev.Alloc(int64(len(src)), "words")
	if err != nil {
		t.Fatal(err)
	}
	defer words.Free()
	s, err := dev.NewStream("copy")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.CopyH2D(packed, 0, host, 0, size); err != nil {
		t.Fatal(err)
	}
	if err := b.UnpackExp4(s, words, packed, 0, l); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(words.Bytes(), src) {
		t.Fatal("the words unpacked on the stream differ from the source")
	}
	if err := b.UnpackExp4(s, packed, packed, 0, l); err == nil {
		t.Error("an output smaller than the words: no error")
	}
	if err := b.UnpackExp4(s, words, words, 0, exp4.Layout{Words: 1, Size: int64(len(src)) + 1}); err == nil {
		t.Error("a packed buffer smaller than its layout: no error")
	}
}
