package kvcache

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// positionBytes is every layer's key and value bytes of the sequence's
// positions 0..Len()−1, read through its block table.
func positionBytes(c *Paged, s *Seq) []byte {
	row := c.cfg.KVHeads * c.cfg.HeadDim * 4 // F32
	var out []byte
	for l := range c.cfg.Layers {
		for _, pool := range []*runtime.Tensor{c.K[l], c.V[l]} {
			for p := range s.Len() {
				slot := s.Slot(p)
				out = append(out, pool.Bytes()[slot*row:(slot+1)*row]...)
			}
		}
	}
	return out
}

// fillSeq reserves and commits n positions of s and writes random bytes into
// their rows of every pool.
func fillSeq(t *testing.T, c *Paged, s *Seq, n int, rng *rand.Rand) {
	t.Helper()
	if err := s.Reserve(n); err != nil {
		t.Fatal(err)
	}
	row := c.cfg.KVHeads * c.cfg.HeadDim * 4
	for l := range c.cfg.Layers {
		for _, pool := range []*runtime.Tensor{c.K[l], c.V[l]} {
			for p := s.Len(); p < s.Len()+n; p++ {
				slot := s.Slot(p)
				for i := slot * row; i < (slot+1)*row; i++ {
					pool.Bytes()[i] = byte(rng.Uint32())
				}
			}
		}
	}
	if err := s.Commit(n); err != nil {
		t.Fatal(err)
	}
}

// TestSwapRoundTrip: a sequence swapped out gives its blocks back and keeps
// its length; its blocks are taken and overwritten by another; swapped in,
// it holds other blocks with the same bits in every layer's keys and
// values. The swap area grows by chunks (two blocks here), never past its
// budget, and is empty at the end.
func TestSwapRoundTrip(t *testing.T) {
	old := swapChunkBytes
	swapChunkBytes = 2 * 384 // two blocks of this shape (2·2·4·2·3·4 bytes)
	defer func() { swapChunkBytes = old }()
	c, _, dev := newCache(t, 8)
	if per := c.cfg.BlockBytes(runtime.F32); per != 384 {
		t.Fatalf("block bytes %d, want 384 (the test's chunk size assumes it)", per)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	keep := c.NewSeq() // holds block 0 so the swapped one does not start there
	fillSeq(t, c, keep, 3, rng)
	s := c.NewSeq()
	fillSeq(t, c, s, 7, rng)
	fillSeq(t, c, s, 6, rng) // 13 positions: 4 blocks, the last partly filled
	want := positionBytes(c, s)
	before := slices.Clone(s.Blocks())
	sw, err := c.NewSwap(5 * 384)
	if err != nil {
		t.Fatal(err)
	}
	if err := sw.Out(s); err != nil {
		t.Fatal(err)
	}
	if !s.Swapped() || s.Len() != 13 || s.SwappedBlocks() != 4 || len(s.Blocks()) != 0 {
		t.Fatalf("swapped out: swapped %v, length %d, %d swapped blocks, %d held; want true, 13, 4, 0", s.Swapped(), s.Len(), s.SwappedBlocks(), len(s.Blocks()))
	}
	if c.FreeBlocks() != 7 || sw.UsedBlocks() != 4 {
		t.Fatalf("after the swap-out: %d free blocks, %d swapped; want 7, 4", c.FreeBlocks(), sw.UsedBlocks())
	}
	if got := sw.HostBytes(); got != 4*384 || dev.HostMemory().InUse != got {
		t.Fatalf("swap area host bytes %d (device host in use %d), want two chunks of 2 blocks: %d", got, dev.HostMemory().InUse, 4*384)
	}
	if err := s.Reserve(1); err == nil || !strings.Contains(err.Error(), "swapped-out") {
		t.Errorf("Reserve of a swapped-out sequence: %v", err)
	}
	// Another sequence takes the freed blocks and writes over them.
	other := c.NewSeq()
	fillSeq(t, c, other, 4*4, rng)
	if err := sw.In(s); !errors.Is(err, ErrOutOfBlocks) || !strings.Contains(err.Error(), "needs 4 blocks") {
		t.Fatalf("swap-in with 3 free blocks: %v, want ErrOutOfBlocks naming the need", err)
	}
	if !s.Swapped() || c.FreeBlocks() != 3 || sw.UsedBlocks() != 4 {
		t.Fatalf("a failed swap-in changed something: swapped %v, %d free, %d swapped", s.Swapped(), c.FreeBlocks(), sw.UsedBlocks())
	}
	other.Free()
	spoil := c.NewSeq()
	fillSeq(t, c, spoil, 2*4, rng) // takes (and spoils) two of the old blocks
	if err := sw.In(s); err != nil {
		t.Fatal(err)
	}
	if s.Swapped() || s.Len() != 13 || sw.UsedBlocks() != 0 || len(s.Blocks()) != 4 {
		t.Fatalf("swapped in: swapped %v, length %d, %d still swapped, %d blocks", s.Swapped(), s.Len(), sw.UsedBlocks(), len(s.Blocks()))
	}
	if slices.Equal(s.Blocks(), before) {
		t.Fatalf("swapped in to the same blocks %v: the test does not check a move", before)
	}
	if got := positionBytes(c, s); !bytes.Equal(got, want) {
		t.Fatalf("keys and values after the round trip differ from before (blocks %v then %v)", before, s.Blocks())
	}
	// A second round trip reuses the chunks.
	if err := sw.Out(s); err != nil {
		t.Fatal(err)
	}
	if sw.HostBytes() != 4*384 {
		t.Errorf("the second swap-out grew the area to %d bytes", sw.HostBytes())
	}
	if err := sw.Out(s); err == nil || !strings.Contains(err.Error(), "already swapped out") {
		t.Errorf("swapping out twice: %v", err)
	}
	s.Free() // frees its places in the swap area
	spoil.Free()
	keep.Free()
	if sw.UsedBlocks() != 0 || c.FreeBlocks() != 8 {
		t.Fatalf("at the end: %d swapped blocks, %d free; want 0, 8", sw.UsedBlocks(), c.FreeBlocks())
	}
	if err := sw.In(s); err == nil {
		t.Errorf("swap-in of a freed sequence: no error")
	}
	c.Close()
	if dev.HostMemory().InUse != 0 {
		t.Errorf("after the cache's Close the swap area holds %d host bytes", dev.HostMemory().InUse)
	}
}

// TestSwapFull: a swap-out beyond the budget is ErrSwapFull naming the
// blocks, and the sequence keeps its blocks; a budget below one block holds
// none.
func TestSwapFull(t *testing.T) {
	c, _, dev := newCache(t, 8)
	rng := rand.New(rand.NewPCG(3, 4))
	a, b := c.NewSeq(), c.NewSeq()
	fillSeq(t, c, a, 8, rng) // 2 blocks
	fillSeq(t, c, b, 9, rng) // 3 blocks
	sw, err := c.NewSwap(4*384 + 100)
	if err != nil {
		t.Fatal(err)
	}
	if sw.CapacityBlocks() != 4 {
		t.Fatalf("capacity %d blocks, want 4", sw.CapacityBlocks())
	}
	if err := sw.Out(a); err != nil {
		t.Fatal(err)
	}
	wantB := positionBytes(c, b)
	err = sw.Out(b)
	if !errors.Is(err, ErrSwapFull) || !strings.Contains(err.Error(), "3 blocks to swap out, 2 of its 4 blocks") {
		t.Fatalf("swap-out past the budget: %v, want ErrSwapFull naming the blocks", err)
	}
	if b.Swapped() || len(b.Blocks()) != 3 || !bytes.Equal(positionBytes(c, b), wantB) || c.FreeBlocks() != 5 {
		t.Fatalf("a refused swap-out changed the sequence or the pool")
	}
	if sw.HostBytes() > sw.Budget() || dev.HostMemory().InUse > sw.Budget() {
		t.Errorf("swap area takes %d host bytes, budget %d", sw.HostBytes(), sw.Budget())
	}
	tiny, err := c.NewSwap(383)
	if err != nil {
		t.Fatal(err)
	}
	if err := tiny.Out(b); !errors.Is(err, ErrSwapFull) {
		t.Errorf("swap-out into a budget below one block: %v", err)
	}
	if _, err := c.NewSwap(-1); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("negative budget: %v", err)
	}
	if err := tiny.In(a); err == nil {
		t.Errorf("swap-in from another swap area: no error")
	}
	// Close frees the swap area with a sequence still swapped out.
	c.Close()
	if dev.HostMemory().InUse != 0 {
		t.Errorf("after Close: %d host bytes held", dev.HostMemory().InUse)
	}
	if err := sw.In(a); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("swap-in after Close: %v", err)
	}
}
