package decoder

import (
	"errors"
	"fmt"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// Cache is what a forward needs of a KV cache: the keys and values of the
// positions one sequence has seen, per layer. A forward of T tokens starts
// at position Len(); each layer's attention calls Append with its new keys
// and values, then View to attend; after every layer ran, Forward calls
// Commit(T). KVCache is the contiguous implementation; a paged cache
// implements the same methods.
type Cache interface {
	// Len is the number of positions filled.
	Len() int
	// Cap is the number of positions the cache can hold.
	Cap() int
	// Append writes layer's keys and values k, v [T,K,d] at positions
	// Len()..Len()+T-1.
	Append(b kernels.Backend, layer int, k, v *runtime.Tensor) error
	// View is layer's keys and values [C,K,d], positions 0..Len()+T-1 of
	// them valid after this forward's Append: what the attention kernel
	// reads.
	View(layer int) (k, v *runtime.Tensor)
	// Commit marks n more positions filled.
	Commit(n int) error
	// Truncate drops positions n.. (the memory is kept): the next forward
	// writes position n.
	Truncate(n int) error
}

// Direct is a Cache whose View is its storage: the attention may write new
// positions straight into the view (the fused RoPE-and-store kernel,
// kernels.RoPEStorer) instead of calling Append.
type Direct interface {
	Cache
	// DirectView marks the cache; it does nothing.
	DirectView()
}

// KVCache holds each layer's keys and values, [C,K,d] each, for positions
// 0..Len()-1, in one contiguous tensor per layer and kind.
type KVCache struct {
	K, V []*runtime.Tensor
	n    int
	bufs []*runtime.DeviceBuffer
	// peers are the other shards' caches, rank 1 first, when a sharded
	// model's NewKVCache made this one (rank 0's): Reset, Truncate and
	// Free apply to them too.
	peers []*KVCache
	// host holds the keys and values of the layers an offload plan
	// computes on the host (hostrun.go), made at their first forward.
	host *hostKV
}

// NewKVCache allocates a cache of capacity positions on b's device. The
// cache is the caller's: free it (KVCache.Free) before the model's session
// closes, whose Close otherwise reports the device memory still held.
// After Stop or Close it returns an error wrapping ErrClosed.
func (m *Model) NewKVCache(b kernels.Backend, capacity int) (*KVCache, error) {
	if m == nil {
		return nil, errors.New("decoder.NewKVCache: nil model")
	}
	if b == nil {
		return nil, errors.New("decoder.NewKVCache: nil backend")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.newKVCache(b, capacity)
}

// newKVCache is NewKVCache with the forward lock held.
func (m *Model) newKVCache(b kernels.Backend, capacity int) (*KVCache, error) {
	if m.closed {
		return nil, fmt.Errorf("decoder.NewKVCache: %w", ErrClosed)
	}
	if capacity <= 0 {
		return nil, fmt.Errorf("decoder: KV cache capacity %d must be positive", capacity)
	}
	need := m.KVCacheBytes(b, capacity)
	if avail := runtime.Available(b.Device()); avail > 0 && need > float64(avail) {
		return nil, fmt.Errorf("decoder: a KV cache of %d positions needs %s (%d layers × keys and values × %d heads × %d × %s), more than the %s %s has free: %w",
			capacity, runtime.FormatBytes(int64(min(need, 1<<62))), len(m.Layers), m.Cfg.NumKeyValueHeads, m.Cfg.HeadDim, b.ActDType(),
			runtime.FormatBytes(avail), b.Device().Name(), runtime.ErrOutOfMemory)
	}
	c := &KVCache{}
	if g := m.group; g != nil {
		for r, s := range g.shards[1:] {
			p, err := s.NewKVCache(g.backends[r+1], capacity)
			if err != nil {
				c.Free()
				return nil, err
			}
			c.peers = append(c.peers, p)
		}
	}
	shape := runtime.Shape{capacity, m.Cfg.NumKeyValueHeads, m.Cfg.HeadDim}
	for i := range m.Layers {
		for _, kv := range []string{"k", "v"} {
			t, err := runtime.NewTensor(b.Device(), b.ActDType(), shape, fmt.Sprintf("kv cache layer %d %s", i, kv))
			if err != nil {
				c.Free()
				return nil, err
			}
			c.bufs = append(c.bufs, t.Buffer())
			if kv == "k" {
				c.K = append(c.K, t)
			} else {
				c.V = append(c.V, t)
			}
		}
	}
	return c, nil
}

// KVCacheBytes is the device memory NewKVCache(b, capacity) allocates (a
// float64: a hostile capacity must not overflow the check).
func (m *Model) KVCacheBytes(b kernels.Backend, capacity int) float64 {
	return 2 * float64(len(m.Layers)) * float64(capacity) * float64(m.Cfg.NumKeyValueHeads) * float64(m.Cfg.HeadDim) * float64(b.ActDType().Size())
}

// Len is the number of positions filled.
func (c *KVCache) Len() int { return c.n }

// Cap is the number of positions the cache holds.
func (c *KVCache) Cap() int { return c.K[0].Dim(0) }

// Append stores k and v [T,K,d] of layer at positions Len()...
func (c *KVCache) Append(b kernels.Backend, layer int, k, v *runtime.Tensor) error {
	if err := b.StoreKV(c.K[layer], k, c.n); err != nil {
		return err
	}
	return b.StoreKV(c.V[layer], v, c.n)
}

// View is layer's key and value storage.
func (c *KVCache) View(layer int) (k, v *runtime.Tensor) { return c.K[layer], c.V[layer] }

// DirectView marks KVCache as a Direct cache.
func (c *KVCache) DirectView() {}

// Commit marks n more positions filled.
func (c *KVCache) Commit(n int) error {
	if n < 0 || c.n+n > c.Cap() {
		return fmt.Errorf("decoder.KVCache.Commit(%d): %d cached of capacity %d", n, c.n, c.Cap())
	}
	c.n += n
	return nil
}

// Truncate drops positions n.. from the cache (the memory is kept): the next
// Forward writes position n. Benchmarks use it to time steps at a fixed
// context.
func (c *KVCache) Truncate(n int) error {
	if n < 0 || n > c.n {
		return fmt.Errorf("decoder.KVCache.Truncate(%d): the cache holds %d positions", n, c.n)
	}
	for _, p := range c.peers {
		if err := p.Truncate(n); err != nil {
			return err
		}
	}
	c.n = n
	return nil
}

// Reset empties the cache (the memory is kept).
func (c *KVCache) Reset() {
	c.n = 0
	for _, p := range c.peers {
		p.Reset()
	}
}

// Free returns the cache's memory.
func (c *KVCache) Free() {
	if c.host != nil {
		c.host.free()
		c.host = nil
	}
	for _, b := range c.bufs {
		b.Free()
	}
	c.bufs = nil
	for _, p := range c.peers {
		p.Free()
	}
	c.peers = nil
}
