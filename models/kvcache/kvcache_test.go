package kvcache

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

func newCache(t *testing.T, blocks int) (*Paged, kernels.Backend, runtime.Device) {
	t.Helper()
	dev := runtime.NewCPU(0)
	t.Cleanup(func() {
		if err := dev.Close(); err != nil {
			t.Error(err)
		}
	})
	b, err := kernels.NewCPUBackend(dev)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(dev, runtime.F32, Config{Layers: 2, KVHeads: 2, HeadDim: 3, BlockSize: 4, Blocks: blocks})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, b, dev
}

// TestReserveFree: sequences take whole blocks as they grow, an
// over-large reservation is ErrOutOfBlocks and takes nothing, and freeing
// returns every block.
func TestReserveFree(t *testing.T) {
	c, _, _ := newCache(t, 5)
	a, b := c.NewSeq(), c.NewSeq()
	if err := a.Reserve(9); err != nil { // 3 blocks
		t.Fatal(err)
	}
	if err := a.Commit(9); err != nil {
		t.Fatal(err)
	}
	if err := a.Reserve(3); err != nil { // 12 positions: still 3 blocks
		t.Fatal(err)
	}
	if got := c.FreeBlocks(); got != 2 {
		t.Fatalf("free blocks %d, want 2", got)
	}
	err := b.Reserve(9)
	if !errors.Is(err, ErrOutOfBlocks) || !strings.Contains(err.Error(), "need 3 more blocks") || !strings.Contains(err.Error(), "2 of 5 are free") {
		t.Fatalf("error %v, want ErrOutOfBlocks naming the blocks", err)
	}
	if c.FreeBlocks() != 2 || len(b.Blocks()) != 0 {
		t.Fatalf("a failed reservation took blocks")
	}
	if err := b.Reserve(8); err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(b.Blocks(), func(x int32) bool { return slices.Contains(a.Blocks(), x) }) {
		t.Fatalf("sequences share blocks: %v, %v", a.Blocks(), b.Blocks())
	}
	if err := a.Commit(4); err == nil {
		t.Errorf("commit past the reservation: no error")
	}
	a.Free()
	a.Free()
	b.Free()
	if c.FreeBlocks() != 5 || c.LiveSeqs() != 0 {
		t.Fatalf("after freeing: %d free blocks, %d live sequences; want 5, 0", c.FreeBlocks(), c.LiveSeqs())
	}
	if err := a.Reserve(1); err == nil {
		t.Errorf("reserve on a freed sequence: no error")
	}
}

// TestStoreGather: keys stored a few positions at a time across block
// boundaries come back in order through Gather and sit where Layout's
// block table says.
func TestStoreGather(t *testing.T) {
	c, b, dev := newCache(t, 6)
	other := c.NewSeq() // interleave so the sequence's blocks are not adjacent
	s := c.NewSeq()
	row := 2 * 3
	var all []float32
	for step, n := range []int{3, 1, 5, 2} {
		if err := s.Reserve(n); err != nil {
			t.Fatal(err)
		}
		if err := other.Reserve(n); err != nil {
			t.Fatal(err)
		}
		k, err := runtime.NewTensor(dev, runtime.F32, runtime.Shape{n, 2, 3}, "k")
		if err != nil {
			t.Fatal(err)
		}
		for i := range k.F32() {
			k.F32()[i] = float32(step*1000 + len(all) + i)
		}
		all = append(all, k.F32()...)
		for l := range 2 {
			if err := c.Store(b, l, s, k, k); err != nil {
				t.Fatal(err)
			}
		}
		k.Buffer().Free()
		if err := s.Commit(n); err != nil {
			t.Fatal(err)
		}
		if err := other.Commit(n); err != nil {
			t.Fatal(err)
		}
	}
	n := s.Len()
	kd, _ := runtime.NewTensor(dev, runtime.F32, runtime.Shape{n + 2, 2, 3}, "kd")
	vd, _ := runtime.NewTensor(dev, runtime.F32, runtime.Shape{n + 2, 2, 3}, "vd")
	defer kd.Buffer().Free()
	defer vd.Buffer().Free()
	if err := c.Gather(b, 1, s, n, kd, vd); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(kd.F32()[:n*row], all) || !slices.Equal(vd.F32()[:n*row], all) {
		t.Fatalf("gathered keys differ from the stored ones")
	}
	kv := c.Layout([]*Seq{other, s}, []int{0, 0})
	for p := range n {
		slot := int(kv.BlockTable[kv.MaxBlocks+p/4])*4 + p%4
		if !slices.Equal(c.K[0].F32()[slot*row:(slot+1)*row], all[p*row:(p+1)*row]) {
			t.Fatalf("position %d is not at the layout's slot %d", p, slot)
		}
	}
	if kv.SeqLens[1] != int32(n) {
		t.Errorf("layout length %d, want %d", kv.SeqLens[1], n)
	}
	// StoreAt overwrites positions 2..6 (across a block boundary) in place,
	// Len() unchanged.
	over, _ := runtime.NewTensor(dev, runtime.F32, runtime.Shape{5, 2, 3}, "over")
	defer over.Buffer().Free()
	for i := range over.F32() {
		over.F32()[i] = float32(-1 - i)
	}
	if err := c.StoreAt(b, 1, s, 2, over, over); err != nil {
		t.Fatal(err)
	}
	copy(all[2*row:], over.F32())
	if err := c.Gather(b, 1, s, n, kd, vd); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(kd.F32()[:n*row], all) || !slices.Equal(vd.F32()[:n*row], all) || s.Len() != n {
		t.Fatalf("after StoreAt: gathered keys differ from the stored ones, or the length %d moved from %d", s.Len(), n)
	}
	// A store past the reservation is an error, not a write into another's block.
	k, _ := runtime.NewTensor(dev, runtime.F32, runtime.Shape{s.Cap() - n + 1, 2, 3}, "k")
	defer k.Buffer().Free()
	if err := c.Store(b, 0, s, k, k); err == nil || !strings.Contains(err.Error(), "Reserve first") {
		t.Errorf("store past the reservation: %v", err)
	}
	for _, pos := range []int{-1, s.Cap() - 4} {
		if err := c.StoreAt(b, 0, s, pos, over, over); err == nil {
			t.Errorf("StoreAt(%d) of 5 positions with room for %d: no error", pos, s.Cap())
		}
	}
	if err := c.StoreAt(b, 2, s, 0, over, over); err == nil || !strings.Contains(err.Error(), "layer 2") {
		t.Errorf("StoreAt of layer 2 of 2: %v", err)
	}
	s.Free()
	other.Free()
	if c.FreeBlocks() != 6 {
		t.Errorf("%d free blocks at the end, want 6", c.FreeBlocks())
	}
}

// TestBadConfig: a cache without blocks, or a budget below one block, is an
// error naming the block's size.
func TestBadConfig(t *testing.T) {
	dev := runtime.NewCPU(0)
	defer dev.Close()
	cfg := Config{Layers: 2, KVHeads: 2, HeadDim: 4}
	if n := cfg.BlocksForBudget(cfg.BlockBytes(runtime.F32)*3+1, runtime.F32); n != 3 {
		t.Errorf("blocks for a budget of 3 blocks and a byte: %d", n)
	}
	if _, err := New(dev, runtime.F32, cfg); err == nil || !strings.Contains(err.Error(), "at least one") {
		t.Errorf("no blocks: %v", err)
	}
	if _, err := New(dev, runtime.F32, Config{Layers: 0, KVHeads: 2, HeadDim: 4, Blocks: 1}); err == nil {
		t.Errorf("no layers: no error")
	}
}

// countingBackend counts StoreKV calls.
type countingBackend struct {
	*kernels.CPUBackend
	stores int
}

func (b *countingBackend) StoreKV(cache, x *runtime.Tensor, pos0 int) error {
	b.stores++
	return b.CPUBackend.StoreKV(cache, x, pos0)
}

// TestStoreGatherRuns: StoreAt and Gather copy each run of physically
// consecutive blocks in one StoreKV a pool, for a sequence whose blocks are
// all consecutive and for one whose blocks are split by another's, starting
// and ending inside blocks; every position lands at its Slot and comes
// back in order.
func TestStoreGatherRuns(t *testing.T) {
	c, b0, dev := newCache(t, 12)
	b := &countingBackend{CPUBackend: b0.(*kernels.CPUBackend)}
	row := 2 * 3
	runsOf := func(blocks []int32) int {
		n := 1
		for i := 1; i < len(blocks); i++ {
			if blocks[i] != blocks[i-1]+1 {
				n++
			}
		}
		return n
	}
	fresh, other := c.NewSeq(), c.NewSeq()
	if err := fresh.Reserve(16); err != nil { // 4 blocks taken at once
		t.Fatal(err)
	}
	split := c.NewSeq() // 2 blocks, another's block, 2 blocks
	for _, r := range []struct {
		s *Seq
		n int
	}{{split, 8}, {other, 4}, {split, 16}} { // Reserve counts from Len(), 0 here
		if err := r.s.Reserve(r.n); err != nil {
			t.Fatal(err)
		}
	}
	if runsOf(fresh.Blocks()) != 1 || runsOf(split.Blocks()) != 2 {
		t.Fatalf("blocks %v and %v: want one run and two", fresh.Blocks(), split.Blocks())
	}
	for _, tc := range []struct {
		name   string
		s      *Seq
		pos, T int
	}{{"consecutive", fresh, 0, 16}, {"consecutive, inside blocks", fresh, 3, 10}, {"split", split, 0, 16}, {"split, inside blocks", split, 2, 13}} {
		t.Run(tc.name, func(t *testing.T) {
			x, err := runtime.NewTensor(dev, runtime.F32, runtime.Shape{tc.T, 2, 3}, "x")
			if err != nil {
				t.Fatal(err)
			}
			defer x.Buffer().Free()
			for i := range x.F32() {
				x.F32()[i] = float32(1000*tc.pos + tc.T + i)
			}
			bs := 4
			want := 2 * runsOf(tc.s.Blocks()[tc.pos/bs:(tc.pos+tc.T-1)/bs+1])
			b.stores = 0
			if err := c.StoreAt(b, 1, tc.s, tc.pos, x, x); err != nil {
				t.Fatal(err)
			}
			if b.stores != want {
				t.Errorf("StoreAt: %d StoreKV calls, want %d (blocks %v)", b.stores, want, tc.s.Blocks())
			}
			for i := range tc.T {
				slot := tc.s.Slot(tc.pos + i)
				if !slices.Equal(c.K[1].F32()[slot*row:(slot+1)*row], x.F32()[i*row:(i+1)*row]) ||
					!slices.Equal(c.V[1].F32()[slot*row:(slot+1)*row], x.F32()[i*row:(i+1)*row]) {
					t.Fatalf("position %d is not at its slot %d", tc.pos+i, slot)
				}
			}
			n := tc.pos + tc.T
			kd, _ := runtime.NewTensor(dev, runtime.F32, runtime.Shape{n, 2, 3}, "kd")
			vd, _ := runtime.NewTensor(dev, runtime.F32, runtime.Shape{n, 2, 3}, "vd")
			defer kd.Buffer().Free()
			defer vd.Buffer().Free()
			b.stores = 0
			if err := c.Gather(b, 1, tc.s, n, kd, vd); err != nil {
				t.Fatal(err)
			}
			if want := 2 * runsOf(tc.s.Blocks()[:(n-1)/bs+1]); b.stores != want {
				t.Errorf("Gather: %d StoreKV calls, want %d (blocks %v)", b.stores, want, tc.s.Blocks())
			}
			for p := range n {
				slot := tc.s.Slot(p)
				if !slices.Equal(kd.F32()[p*row:(p+1)*row], c.K[1].F32()[slot*row:(slot+1)*row]) ||
					!slices.Equal(vd.F32()[p*row:(p+1)*row], c.V[1].F32()[slot*row:(slot+1)*row]) {
					t.Fatalf("gathered position %d differs from its slot %d", p, slot)
				}
			}
			if !slices.Equal(kd.F32()[tc.pos*row:], x.F32()) {
				t.Fatalf("gathered positions %d.. differ from the stored ones", tc.pos)
			}
		})
	}
	fresh.Free()
	split.Free()
	other.Free()
}
