package kvcache

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// mirrorRows is layer's key and value bytes of the sequence's positions
// 0..Len()−1 in the pools k and v (F32), read through its block table.
func mirrorRows(c *Paged, s *Seq, k, v *runtime.Tensor) []byte {
	row := c.cfg.KVHeads * c.cfg.HeadDim * 4
	var out []byte
	for _, pool := range []*runtime.Tensor{k, v} {
		for p := range s.Len() {
			slot := s.Slot(p)
			out = append(out, pool.Bytes()[slot*row:(slot+1)*row]...)
		}
	}
	return out
}

// hostSide is a second cpu device ("host") and its backend.
func hostSide(t *testing.T) (*runtime.CPUDevice, kernels.Backend) {
	t.Helper()
	dev := runtime.NewCPUNamed("host", 0)
	t.Cleanup(func() {
		if err := dev.Close(); err != nil {
			t.Error(err)
		}
	})
	b, err := kernels.NewCPUBackend(dev)
	if err != nil {
		t.Fatal(err)
	}
	return dev, b
}

// TestMirror: a layer's copy on another device holds the sequences' rows
// at the cache's slots; rows stored in the copy reach the cache through
// WriteBack (that layer only); rows written in the cache afterwards
// (StoreAt, a forward reporting Wrote, a swap into other blocks) reach the
// copy at its next Layer, and rows written without a report do not; Drop
// and a mirror on another backend start over; bad calls are errors naming
// what is wrong; Close frees the copies.
func TestMirror(t *testing.T) {
	c, b, _ := newCache(t, 8)
	hdev, hb := hostSide(t)
	rng := rand.New(rand.NewPCG(1, 2))
	a, s2 := c.NewSeq(), c.NewSeq()
	fillSeq(t, c, a, 6, rng)
	fillSeq(t, c, s2, 5, rng)
	mi, err := c.Mirror(hb)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := c.Mirror(hb); again != mi {
		t.Fatal("a second Mirror on the same backend made another mirror")
	}
	var made []*runtime.Tensor
	defer func() {
		for _, x := range made {
			x.Buffer().Free()
		}
	}()
	one := func(n int) *runtime.Tensor {
		x, err := runtime.NewTensor(hdev, runtime.F32, runtime.Shape{n, 2, 3}, "rows")
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, x)
		for i := range x.Bytes() {
			x.Bytes()[i] = byte(rng.Uint32() & 0x3f) // finite floats
		}
		return x
	}
	if err := mi.Store(hb, 1, a, one(1), one(1)); err == nil || !strings.Contains(err.Error(), "no copy") {
		t.Fatalf("Store before Layer: %v; want an error saying the layer has no copy", err)
	}
	if _, _, err := mi.Layer(2); err == nil || !strings.Contains(err.Error(), "Layer(2)") {
		t.Fatalf("Layer(2) of 2 layers: %v", err)
	}
	k, v, err := mi.Layer(1)
	if err != nil {
		t.Fatal(err)
	}
	same := func(what string, s *Seq, want bool) {
		t.Helper()
		got := bytes.Equal(mirrorRows(c, s, k, v), mirrorRows(c, s, c.K[1], c.V[1]))
		if got != want {
			t.Fatalf("%s: the copy equals the cache: %v, want %v", what, got, want)
		}
	}
	same("made", a, true)
	same("made", s2, true)
	if !mi.Mirrored(1) || mi.Mirrored(0) {
		t.Fatal("Mirrored: want layer 1 only")
	}

	// Rows stored in the copy reach the cache's layer 1 (not layer 0).
	if err := a.Reserve(2); err != nil {
		t.Fatal(err)
	}
	before0 := mirrorRows(c, s2, c.K[0], c.V[0])
	nk, nv := one(2), one(2)
	if err := mi.Store(hb, 1, a, nk, nv); err != nil {
		t.Fatal(err)
	}
	if err := mi.WriteBack(b, 1, []*Seq{a}, []int{a.Len()}, []int{2}); err != nil {
		t.Fatal(err)
	}
	if err := a.Commit(2); err != nil {
		t.Fatal(err)
	}
	same("after WriteBack", a, true)
	row := 2 * 3 * 4
	if got := c.K[1].Bytes()[a.Slot(7)*row : (a.Slot(7)+1)*row]; !bytes.Equal(got, nk.Bytes()[row:]) {
		t.Fatal("WriteBack: the cache's key row of position 7 is not the one stored")
	}
	if !bytes.Equal(before0, mirrorRows(c, s2, c.K[0], c.V[0])) {
		t.Fatal("WriteBack of layer 1 changed layer 0")
	}

	// Writes in the cache: StoreAt, reported ones, unreported ones.
	if err := c.StoreAt(b, 1, s2, 1, one(3), one(3)); err != nil {
		t.Fatal(err)
	}
	same("after StoreAt, before Layer", s2, false)
	if _, _, err := mi.Layer(1); err != nil {
		t.Fatal(err)
	}
	same("after StoreAt and Layer", s2, true)
	slot := s2.Slot(4)
	c.K[1].Bytes()[slot*row] ^= 0x40
	if _, _, err := mi.Layer(1); err != nil {
		t.Fatal(err)
	}
	same("an unreported write", s2, false)
	c.Wrote(1, []int32{int32(slot)})
	if _, _, err := mi.Layer(1); err != nil {
		t.Fatal(err)
	}
	same("a write reported by Wrote", s2, true)

	// A swap into other blocks, whose rows in the copy were another's.
	sw, err := c.NewSwap(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	old := append([]int32(nil), a.Blocks()...)
	if err := sw.Out(a); err != nil {
		t.Fatal(err)
	}
	hold := c.NewSeq()
	if err := hold.Reserve(8); err != nil {
		t.Fatal(err)
	}
	if err := sw.In(a); err != nil {
		t.Fatal(err)
	}
	hold.Free()
	if slices.Equal(old, a.Blocks()) {
		t.Fatal("the swap brought the sequence back into the same blocks: the test needs others")
	}
	if _, _, err := mi.Layer(1); err != nil {
		t.Fatal(err)
	}
	same("after a swap and Layer", a, true)

	// Drop, another backend, Close.
	mi.Drop(1)
	if pk, _ := mi.Pools(1); mi.Mirrored(1) || pk != nil {
		t.Fatal("Drop kept the copy")
	}
	if k, v, err = mi.Layer(1); err != nil {
		t.Fatal(err)
	}
	same("made again after Drop", a, true)
	_, hb2 := hostSide(t)
	mi2, err := c.Mirror(hb2)
	if err != nil || mi2 == mi || mi2.Mirrored(1) {
		t.Fatalf("a mirror on another backend: %v, same %v, copy kept %v", err, mi2 == mi, mi2 != nil && mi2.Mirrored(1))
	}
	if _, _, err := mi2.Layer(0); err != nil {
		t.Fatal(err)
	}
	if hdev.Memory().InUse != 12*2*3*4 { // the 12 rows made by one (the first mirror's copy freed)
		t.Errorf("first host device: %d bytes in use after the mirror moved to another backend", hdev.Memory().InUse)
	}
	c.Close()
	if _, err := c.Mirror(hb); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("Mirror of a closed cache: %v", err)
	}
}
