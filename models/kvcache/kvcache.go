// Package kvcache is the paged KV cache: every layer's keys and values of
// many sequences in one pool of fixed-size blocks, each sequence holding a
// block table (its blocks in position order), blocks taken as a sequence
// grows and returned when it ends.
//
// Shapes: L layers, K key/value heads, d head width, B positions per block,
// N blocks; each layer has a key pool and a value pool of [N·B, K, d] rows,
// position p of a sequence in row table[p/B]·B + p%B.
//
// A Paged cache is used from one goroutine at a time (the one running the
// forwards); its block accounting is safe to read from others.
//
// A sequence can be swapped out (Swap.Out): its blocks' keys and values,
// every layer, are copied to a host-side swap area and the blocks returned
// to the pool, its length kept; swapped in (Swap.In) it takes free blocks,
// perhaps others, and gets the same bits back. The copies run on the
// device's compute stream, in order with the forwards, so they need no
// waiting: on a GPU the swap area is pinned host memory and a swap is an
// asynchronous copy, allocated lazily in chunks up to the swap area's byte
// budget.
package kvcache

import (
	"errors"
	"fmt"
	"sync"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// DefaultBlockSize is the positions per block when Config.BlockSize is 0.
const DefaultBlockSize = 16

// ErrOutOfBlocks is wrapped by the error of a sequence that needs more
// blocks than the pool has free.
var ErrOutOfBlocks = errors.New("kvcache: out of KV blocks")

// Config is a paged cache's shape.
type Config struct {
	Layers    int // the model's layers (one key and one value pool each)
	KVHeads   int // key/value heads of a position
	HeadDim   int // values of a head
	BlockSize int // positions per block; 0: DefaultBlockSize
	Blocks    int // blocks in the pool
}

// BlockBytes is the memory of one block over all layers, keys and values,
// in dt: 2·L·B·K·d·size(dt).
func (c Config) BlockBytes(dt runtime.DType) int64 {
	return 2 * int64(c.Layers) * int64(c.blockSize()) * int64(c.KVHeads) * int64(c.HeadDim) * int64(dt.Size())
}

func (c Config) blockSize() int {
	if c.BlockSize == 0 {
		return DefaultBlockSize
	}
	return c.BlockSize
}

// BlocksForBudget is the number of blocks of c's shape that fit in budget
// bytes of dt (c.Blocks is ignored).
func (c Config) BlocksForBudget(budget int64, dt runtime.DType) int {
	per := c.BlockBytes(dt)
	if per <= 0 || budget <= 0 {
		return 0
	}
	return int(budget / per)
}

// Paged is a paged KV cache on one device.
type Paged struct {
	cfg  Config
	dev  runtime.Device
	K, V []*runtime.Tensor // per layer, [Blocks·BlockSize, K, d]
	bufs []*runtime.DeviceBuffer

	mu    sync.Mutex
	free  []int32 // the free blocks, a stack
	live  int     // sequences not yet freed
	swaps []*Swap // the swap areas made by NewSwap, closed with the cache
	// mirror is the copy of some layers on another device (Mirror), freed
	// with the cache.
	mirror *Mirror
}

// New allocates a paged cache of cfg's shape in dt on dev.
func New(dev runtime.Device, dt runtime.DType, cfg Config) (*Paged, error) {
	cfg.BlockSize = cfg.blockSize()
	if cfg.Layers <= 0 || cfg.KVHeads <= 0 || cfg.HeadDim <= 0 || cfg.BlockSize <= 0 {
		return nil, fmt.Errorf("kvcache: layers %d, KV heads %d, head dim %d, block size %d: want positive sizes", cfg.Layers, cfg.KVHeads, cfg.HeadDim, cfg.BlockSize)
	}
	if cfg.Blocks <= 0 {
		return nil, fmt.Errorf("kvcache: %d blocks: the cache needs at least one (a block of %d positions takes %s)",
			cfg.Blocks, cfg.BlockSize, runtime.FormatBytes(cfg.BlockBytes(dt)))
	}
	c := &Paged{cfg: cfg, dev: dev}
	shape := runtime.Shape{cfg.Blocks * cfg.BlockSize, cfg.KVHeads, cfg.HeadDim}
	for l := range cfg.Layers {
		for _, kv := range []string{"k", "v"} {
			t, err := runtime.NewTensor(dev, dt, shape, fmt.Sprintf("paged kv cache layer %d %s", l, kv))
			if err != nil {
				c.Close()
				return nil, fmt.Errorf("kvcache: %d blocks of %d positions: %w", cfg.Blocks, cfg.BlockSize, err)
			}
			c.bufs = append(c.bufs, t.Buffer())
			if kv == "k" {
				c.K = append(c.K, t)
			} else {
				c.V = append(c.V, t)
			}
		}
	}
	c.free = make([]int32, cfg.Blocks)
	for i := range c.free {
		c.free[i] = int32(cfg.Blocks - 1 - i) // block 0 is taken first
	}
	return c, nil
}

// Config is the cache's shape (BlockSize filled in).
func (c *Paged) Config() Config { return c.cfg }

// BlockSize is the positions per block.
func (c *Paged) BlockSize() int { return c.cfg.BlockSize }

// TotalBlocks is the pool's size in blocks.
func (c *Paged) TotalBlocks() int { return c.cfg.Blocks }

// FreeBlocks is the number of blocks no sequence holds.
func (c *Paged) FreeBlocks() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.free)
}

// LiveSeqs is the number of sequences made and not yet freed.
func (c *Paged) LiveSeqs() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.live
}

// BlocksFor is the number of blocks n positions take.
func (c *Paged) BlocksFor(n int) int { return (n + c.cfg.BlockSize - 1) / c.cfg.BlockSize }

// Bytes is the device memory the pools take.
func (c *Paged) Bytes() int64 {
	var n int64
	for _, b := range c.bufs {
		n += b.Size()
	}
	return n
}

// Close returns the pools' memory and that of the cache's swap areas.
// Sequences still live keep their bookkeeping but must not be used in a
// forward (or swapped in) again.
func (c *Paged) Close() {
	c.mu.Lock()
	swaps := c.swaps
	c.swaps = nil
	if c.mirror != nil {
		c.mirror.free()
		c.mirror = nil
	}
	c.mu.Unlock()
	for _, sw := range swaps {
		sw.close()
	}
	for _, b := range c.bufs {
		b.Free()
	}
	c.bufs = nil
}

// Seq is one sequence's place in a paged cache: its block table and the
// number of positions filled.
type Seq struct {
	c      *Paged
	blocks []int32
	n      int
	freed  bool
	sw     *Swap     // the swap area holding it while swapped out; nil else
	slots  []swapRef // its blocks' places in sw, in position order
}

// NewSeq starts an empty sequence (no blocks yet).
func (c *Paged) NewSeq() *Seq {
	c.mu.Lock()
	c.live++
	c.mu.Unlock()
	return &Seq{c: c}
}

// Cache is the cache the sequence lives in.
func (s *Seq) Cache() *Paged { return s.c }

// Len is the number of positions filled.
func (s *Seq) Len() int { return s.n }

// Cap is the number of positions its blocks hold.
func (s *Seq) Cap() int { return len(s.blocks) * s.c.cfg.BlockSize }

// Blocks is the block table: the sequence's blocks in position order. The
// slice is the sequence's own; do not change it.
func (s *Seq) Blocks() []int32 { return s.blocks }

// Freed reports whether Free was called.
func (s *Seq) Freed() bool { return s.freed }

// Reserve makes room for n more positions after Len(), taking blocks from
// the pool as needed. When the pool has too few free blocks it takes none
// and returns an error wrapping ErrOutOfBlocks.
func (s *Seq) Reserve(n int) error {
	if s.freed {
		return errors.New("kvcache: Reserve on a freed sequence")
	}
	if s.sw != nil {
		return errors.New("kvcache: Reserve on a swapped-out sequence (Swap.In first)")
	}
	if n < 0 {
		return fmt.Errorf("kvcache: Reserve(%d): negative", n)
	}
	need := s.c.BlocksFor(s.n+n) - len(s.blocks)
	if need <= 0 {
		return nil
	}
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if need > len(c.free) {
		return fmt.Errorf("%w: %d positions need %d more blocks of %d positions, %d of %d are free",
			ErrOutOfBlocks, s.n+n, need, c.cfg.BlockSize, len(c.free), c.cfg.Blocks)
	}
	top := len(c.free) - need
	for i := len(c.free) - 1; i >= top; i-- {
		s.blocks = append(s.blocks, c.free[i])
	}
	c.free = c.free[:top]
	return nil
}

// Commit marks n more positions filled (after a forward wrote them).
func (s *Seq) Commit(n int) error {
	if n < 0 || s.n+n > s.Cap() {
		return fmt.Errorf("kvcache: Commit(%d): %d filled of %d reserved positions", n, s.n, s.Cap())
	}
	s.n += n
	return nil
}

// Free returns the sequence's blocks to the pool (or, swapped out, its
// places in the swap area); the sequence is unusable after. Freeing twice
// does nothing.
func (s *Seq) Free() {
	if s.freed {
		return
	}
	if s.sw != nil {
		s.sw.release(s.slots)
		s.sw, s.slots = nil, nil
	}
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(s.blocks) - 1; i >= 0; i-- {
		c.free = append(c.free, s.blocks[i])
	}
	s.blocks, s.n, s.freed = nil, 0, true
	c.live--
}

// Slot is the pool row of the sequence's position p (p < Cap()).
func (s *Seq) Slot(p int) int {
	bs := s.c.cfg.BlockSize
	return int(s.blocks[p/bs])*bs + p%bs
}

// Pools is layer's key and value pools [Blocks·BlockSize, K, d].
func (c *Paged) Pools(layer int) (k, v *runtime.Tensor) { return c.K[layer], c.V[layer] }

// Store writes layer's new keys and values k, v [T,K,d] at the sequence's
// positions Len()..Len()+T−1 (reserved before), one StoreKV a K/V per run
// of physically consecutive blocks. A Mirror's copies of those blocks are
// brought up to date at their next Mirror.Layer.
func (c *Paged) Store(b kernels.Backend, layer int, s *Seq, k, v *runtime.Tensor) error {
	return c.StoreAt(b, layer, s, s.n, k, v)
}

// StoreAt writes layer's keys and values k, v [T,K,d] at the sequence's
// positions pos..pos+T−1 (within its reserved room; positions already
// filled are overwritten, and Len() does not change): a copy made
// elsewhere put back into the blocks. A Mirror's copies of those blocks
// are brought up to date at their next Mirror.Layer.
func (c *Paged) StoreAt(b kernels.Backend, layer int, s *Seq, pos int, k, v *runtime.Tensor) error {
	if err := c.storeInto("StoreAt", b, nil, nil, layer, s, pos, k, v); err != nil {
		return err
	}
	if T := k.Dim(0); T > 0 {
		bs := c.cfg.BlockSize
		c.mu.Lock()
		c.markStale(s.blocks[pos/bs : (pos+T-1)/bs+1])
		c.mu.Unlock()
	}
	return nil
}

// storeInto is StoreAt into the pools kPool, vPool (nil: the
// cache's own of layer), its errors named after what.
func (c *Paged) storeInto(what string, b kernels.Backend, kPool, vPool *runtime.Tensor, layer int, s *Seq, pos int, k, v *runtime.Tensor) error {
	if s.c != c || s.freed {
		return fmt.Errorf("kvcache: %s of a sequence that is not live in this cache", what)
	}
	if s.sw != nil {
		return fmt.Errorf("kvcache: %s of a swapped-out sequence (Swap.In first)", what)
	}
	if layer < 0 || layer >= c.cfg.Layers {
		return fmt.Errorf("kvcache: %s of layer %d in a cache of %d layers", what, layer, c.cfg.Layers)
	}
	if kPool == nil {
		kPool, vPool = c.K[layer], c.V[layer]
	}
	T := k.Dim(0)
	if pos < 0 || pos+T > s.Cap() {
		return fmt.Errorf("kvcache: %s of %d positions at position %d of a sequence with room for %d (Reserve first)", what, T, pos, s.Cap())
	}
	return s.slotRuns(pos, T, func(p, slot, run int) error {
		for _, kv := range []struct{ pool, x *runtime.Tensor }{{kPool, k}, {vPool, v}} {
			x, err := kv.x.Slice(p-pos, p-pos+run)
			if err != nil {
				return err
			}
			if err := b.StoreKV(kv.pool, x, slot); err != nil {
				return err
			}
		}
		return nil
	})
}

// Layout is the kernels' view of seqs in a forward that adds news[i]
// positions to seqs[i]: their block tables (rows as wide as the longest) and
// lengths Len()+news[i].
func (c *Paged) Layout(seqs []*Seq, news []int) kernels.PagedKV {
	kv := kernels.PagedKV{BlockSize: c.cfg.BlockSize, SeqLens: make([]int32, len(seqs))}
	for _, s := range seqs {
		kv.MaxBlocks = max(kv.MaxBlocks, len(s.blocks))
	}
	kv.MaxBlocks = max(kv.MaxBlocks, 1)
	kv.BlockTable = make([]int32, len(seqs)*kv.MaxBlocks)
	for i, s := range seqs {
		copy(kv.BlockTable[i*kv.MaxBlocks:], s.blocks)
		kv.SeqLens[i] = int32(s.n + news[i])
	}
	return kv
}

// Gather copies layer's keys and values of the sequence's positions
// 0..n−1 to rows 0..n−1 of k and v [C,K,d] (C ≥ n): a contiguous copy for
// backends without paged attention.
func (c *Paged) Gather(b kernels.Backend, layer int, s *Seq, n int, k, v *runtime.Tensor) error {
	if layer < 0 || layer >= c.cfg.Layers {
		return fmt.Errorf("kvcache: Gather of layer %d in a cache of %d layers", layer, c.cfg.Layers)
	}
	return c.gatherFrom(b, c.K[layer], c.V[layer], layer, s, n, k, v)
}

// gatherFrom is Gather from the pools kPool, vPool.
func (c *Paged) gatherFrom(b kernels.Backend, kPool, vPool *runtime.Tensor, layer int, s *Seq, n int, k, v *runtime.Tensor) error {
	if s.c != c || s.freed {
		return errors.New("kvcache: Gather of a sequence that is not live in this cache")
	}
	if s.sw != nil {
		return errors.New("kvcache: Gather of a swapped-out sequence (Swap.In first)")
	}
	if n > s.Cap() || n > k.Dim(0) {
		return fmt.Errorf("kvcache: gathering %d positions of a sequence with room for %d into %d rows", n, s.Cap(), k.Dim(0))
	}
	return s.slotRuns(0, n, func(p, slot, run int) error {
		for _, kv := range []struct{ pool, dst *runtime.Tensor }{{kPool, k}, {vPool, v}} {
			src, err := kv.pool.Slice(slot, slot+run)
			if err != nil {
				return err
			}
			if err := b.StoreKV(kv.dst, src, p); err != nil {
				return err
			}
		}
		return nil
	})
}

// slotRuns calls f(p, slot, run) for the sequence's positions
// pos..pos+T−1 (within its reserved room) split into runs of consecutive
// pool rows, in order: positions p..p+run−1 sit at rows slot..slot+run−1.
// A run spans as many blocks as are physically consecutive (a fresh
// sequence's usually are: blockRuns), so a copy of a long context is a few
// StoreKV a layer rather than one a block.
func (s *Seq) slotRuns(pos, T int, f func(p, slot, run int) error) error {
	if T <= 0 {
		return nil
	}
	bs := s.c.cfg.BlockSize
	first, last := pos/bs, (pos+T-1)/bs
	return blockRuns(s.blocks[first:last+1], nil, func(lo, hi int) error {
		start, end := max(pos, (first+lo)*bs), min(pos+T, (first+hi)*bs)
		return f(start, s.Slot(start), end-start)
	})
}

// blockRuns calls f(lo, hi) for each maximal run blocks[lo:hi] of
// physically consecutive pool blocks (blocks[i] == blocks[i−1]+1) that
// joins(i) also lets continue (nil: always), in order: the copies of
// Gather, StoreAt and the swap area take one piece per run.
func blockRuns(blocks []int32, joins func(i int) bool, f func(lo, hi int) error) error {
	for lo := 0; lo < len(blocks); {
		hi := lo + 1
		for hi < len(blocks) && blocks[hi] == blocks[hi-1]+1 && (joins == nil || joins(hi)) {
			hi++
		}
		if err := f(lo, hi); err != nil {
			return err
		}
		lo = hi
	}
	return nil
}
