package kvcache

import (
	"errors"
	"fmt"
	"sync"

	"github.com/flextensor-go/flextensor/runtime"
)

// ErrSwapFull is wrapped by the error of a swap-out that needs more room
// than the swap area's byte budget leaves.
var ErrSwapFull = errors.New("kvcache: the swap area is full")

// swapChunkBytes is the most host memory the swap area takes at once: it
// grows by chunks of about this size (whole blocks, at least one) as
// sequences are swapped out, up to its budget.
var swapChunkBytes int64 = 64 << 20 // a variable for the tests

// Swap is a host-side swap area of a Paged cache: room for whole blocks
// (every layer's keys and values) of swapped-out sequences, taken from the
// device's host memory (pinned on a GPU) in chunks as needed, never more
// than its budget. Out and In are used from the goroutine running the
// cache's forwards; the accounting is safe to read from others.
type Swap struct {
	c       *Paged
	budget  int64
	rowRun  int64 // bytes of one block in one layer's key (or value) pool
	maxSlot int   // the most blocks the budget holds

	mu     sync.Mutex
	chunks []swapChunk
	free   []swapRef // free places, a stack
	used   int       // places holding a swapped block
	slots  int       // places in the chunks allocated
	closed bool
}

// swapChunk is one host allocation of the swap area, laid out per layer and
// pool: region (layer, k or v) holds n block runs of rowRun bytes, so that
// consecutive pool blocks going to consecutive places copy in one piece.
type swapChunk struct {
	buf *runtime.HostBuffer
	n   int
}

// swapRef is a place in the swap area: chunk and index in it.
type swapRef struct{ chunk, i int32 }

// NewSwap makes a swap area of at most budget bytes of host memory for the
// cache; none is taken until a sequence is swapped out. A budget below one
// block (Config.BlockBytes) makes every swap-out ErrSwapFull. The cache's
// Close frees it.
func (c *Paged) NewSwap(budget int64) (*Swap, error) {
	if budget < 0 {
		return nil, fmt.Errorf("kvcache.NewSwap: budget %d bytes is negative", budget)
	}
	dt := c.K[0].DType()
	sw := &Swap{c: c, budget: budget,
		rowRun: int64(c.cfg.BlockSize) * int64(c.cfg.KVHeads) * int64(c.cfg.HeadDim) * int64(dt.Size())}
	sw.maxSlot = int(budget / c.cfg.BlockBytes(dt))
	c.mu.Lock()
	c.swaps = append(c.swaps, sw)
	c.mu.Unlock()
	return sw, nil
}

// Budget is the most host bytes the swap area takes.
func (sw *Swap) Budget() int64 { return sw.budget }

// CapacityBlocks is the most blocks the swap area holds at once.
func (sw *Swap) CapacityBlocks() int { return sw.maxSlot }

// UsedBlocks is the number of swapped-out blocks it holds.
func (sw *Swap) UsedBlocks() int {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return sw.used
}

// HostBytes is the host memory taken so far (it is kept for later swaps
// until the cache is closed).
func (sw *Swap) HostBytes() int64 {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	var n int64
	for _, ch := range sw.chunks {
		n += ch.buf.Size()
	}
	return n
}

// Swapped reports whether the sequence is swapped out (Swap.Out).
func (s *Seq) Swapped() bool { return s.sw != nil }

// SwappedBlocks is the number of blocks a swapped-out sequence takes back
// when it is swapped in (0 when it is not swapped out).
func (s *Seq) SwappedBlocks() int { return len(s.slots) }

// Out copies the blocks holding the sequence's Len() positions, every
// layer's keys and values, to the swap area and returns all its blocks to
// the pool; the sequence keeps its length and waits, swapped out, for In.
// With too little room left in the budget it is an error wrapping
// ErrSwapFull and nothing changes; so does a host allocation that fails.
func (sw *Swap) Out(s *Seq) error {
	switch {
	case s == nil || s.c != sw.c || s.freed:
		return errors.New("kvcache: Swap.Out of a sequence that is not live in the swap area's cache")
	case s.sw != nil:
		return errors.New("kvcache: Swap.Out of a sequence already swapped out")
	}
	nb := sw.c.BlocksFor(s.n)
	refs, err := sw.take(nb)
	if err != nil {
		return err
	}
	if err := sw.copy(s.blocks[:nb], refs, true); err != nil {
		sw.release(refs)
		return fmt.Errorf("kvcache: swapping out %d blocks: %w", nb, err)
	}
	c := sw.c
	c.mu.Lock()
	for i := len(s.blocks) - 1; i >= 0; i-- {
		c.free = append(c.free, s.blocks[i])
	}
	c.mu.Unlock()
	s.blocks, s.sw, s.slots = nil, sw, refs
	return nil
}

// In takes blocks for the swapped-out sequence's positions from the pool
// (any free ones), copies its keys and values back into them bit for bit
// and frees its places in the swap area; the sequence is live again with
// the length it had. With too few free blocks it is an error wrapping
// ErrOutOfBlocks and nothing changes.
func (sw *Swap) In(s *Seq) error {
	if s == nil || s.sw != sw || s.freed {
		return errors.New("kvcache: Swap.In of a sequence not swapped out to this swap area")
	}
	sw.mu.Lock()
	closed := sw.closed
	sw.mu.Unlock()
	if closed {
		return errors.New("kvcache: Swap.In after the cache was closed")
	}
	c := sw.c
	nb := len(s.slots)
	c.mu.Lock()
	if nb > len(c.free) {
		free := len(c.free)
		c.mu.Unlock()
		return fmt.Errorf("%w: swapping in %d positions needs %d blocks of %d positions, %d of %d are free",
			ErrOutOfBlocks, s.n, nb, c.cfg.BlockSize, free, c.cfg.Blocks)
	}
	top := len(c.free) - nb
	blocks := make([]int32, 0, nb)
	for i := len(c.free) - 1; i >= top; i-- {
		blocks = append(blocks, c.free[i])
	}
	c.free = c.free[:top]
	c.mu.Unlock()
	if err := sw.copy(blocks, s.slots, false); err != nil {
		c.mu.Lock()
		for i := len(blocks) - 1; i >= 0; i-- {
			c.free = append(c.free, blocks[i])
		}
		c.mu.Unlock()
		return fmt.Errorf("kvcache: swapping in %d blocks: %w", nb, err)
	}
	sw.release(s.slots)
	s.blocks, s.sw, s.slots = blocks, nil, nil
	c.mu.Lock()
	c.markStale(blocks)
	c.mu.Unlock()
	return nil
}

// take reserves n places, allocating chunks within the budget as needed.
func (sw *Swap) take(n int) ([]swapRef, error) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.closed {
		return nil, errors.New("kvcache: Swap.Out after the cache was closed")
	}
	if sw.used+n > sw.maxSlot {
		return nil, fmt.Errorf("%w: %d blocks to swap out, %d of its %d blocks (%s) hold others",
			ErrSwapFull, n, sw.used, sw.maxSlot, runtime.FormatBytes(sw.budget))
	}
	dt := sw.c.K[0].DType()
	per := sw.c.cfg.BlockBytes(dt)
	for len(sw.free) < n {
		k := min(max(1, int(swapChunkBytes/per)), sw.maxSlot-sw.slots)
		buf, err := sw.c.dev.AllocHost(int64(k)*per, fmt.Sprintf("kv cache swap area chunk %d", len(sw.chunks)))
		if err != nil {
			return nil, fmt.Errorf("kvcache: growing the swap area by %d blocks: %w", k, err)
		}
		ci := int32(len(sw.chunks))
		sw.chunks = append(sw.chunks, swapChunk{buf: buf, n: k})
		sw.slots += k
		for i := k - 1; i >= 0; i-- {
			sw.free = append(sw.free, swapRef{ci, int32(i)})
		}
	}
	refs := make([]swapRef, n)
	for i := range refs {
		refs[i] = sw.free[len(sw.free)-1-i]
	}
	sw.free = sw.free[:len(sw.free)-n]
	sw.used += n
	return refs, nil
}

// release returns places to the free stack.
func (sw *Swap) release(refs []swapRef) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	for i := len(refs) - 1; i >= 0; i-- {
		sw.free = append(sw.free, refs[i])
	}
	sw.used -= len(refs)
}

// copy moves blocks[i] to or from place refs[i], every layer's keys and
// values, on the device's compute stream (in order with the forwards); a
// run of consecutive blocks in consecutive places of one chunk is one copy
// a pool.
func (sw *Swap) copy(blocks []int32, refs []swapRef, out bool) error {
	c := sw.c
	st := c.dev.Compute()
	return blockRuns(blocks, func(i int) bool {
		return refs[i].chunk == refs[i-1].chunk && refs[i].i == refs[i-1].i+1
	}, func(lo, hi int) error {
		ch := sw.chunks[refs[lo].chunk]
		n := int64(hi-lo) * sw.rowRun
		for l := range c.cfg.Layers {
			for kv, pool := range []*runtime.Tensor{c.K[l], c.V[l]} {
				dev := pool.Offset() + int64(blocks[lo])*sw.rowRun
				host := (int64(2*l+kv)*int64(ch.n) + int64(refs[lo].i)) * sw.rowRun
				var err error
				if out {
					err = st.CopyD2H(ch.buf, host, pool.Buffer(), dev, n)
				} else {
					err = st.CopyH2D(pool.Buffer(), dev, ch.buf, host, n)
				}
				if err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// close frees the swap area's host memory after the copies queued on the
// compute stream have run; swapped-out sequences cannot come back after.
func (sw *Swap) close() {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.closed {
		return
	}
	sw.closed = true
	if len(sw.chunks) > 0 {
		_ = sw.c.dev.Compute().Synchronize() // a copy's error was the forward's to see
	}
	for _, ch := range sw.chunks {
		ch.buf.Free()
	}
	sw.chunks, sw.free = nil, nil
}
