package decoder

import (
	"fmt"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/kvcache"
	"github.com/flextensor-go/flextensor/runtime"
)

// Host-placed layers: an offload engine with a host backend may plan to
// compute some layers on the host CPU (offload.Config.HostBackend). The
// layer loop asks the module tree where each layer runs (nn.Tree.RunsOn);
// a stretch of consecutive host layers runs with the host backend on a
// workspace and per-layer KV caches of its own on the host, and the
// residual stream crosses the link once each way: copied device→host
// before the stretch's first layer and host→device after its last. This
// file is the single-sequence forward's side (Forward, and so Generate);
// hostbatch.go is ForwardBatch's.

// HiddenStateBytes is the bytes one token's residual stream takes (F32 on
// every backend): what crosses the link each way per host stretch
// (offload.HiddenSizer).
func (m *Model) HiddenStateBytes() int64 { return int64(m.Cfg.HiddenSize) * 4 }

// hostSide is the host's half of host-placed layers: the workspace on the
// host backend's device and the pinned buffer the residual stream crosses
// through.
type hostSide struct {
	b      kernels.Backend
	ws     *workspace
	pinned *runtime.HostBuffer // the device's pinned host memory, [cap, D] F32
	cap    int
}

func (h *hostSide) free() {
	if h.ws != nil {
		h.ws.free()
	}
	h.pinned.Free()
}

// freeHostSide frees the host workspace (Close).
func (m *Model) freeHostSide() {
	if m.host != nil {
		m.host.free()
		m.host = nil
	}
}

// hostSideFor returns the host side for hb and n tokens.
func (m *Model) hostSideFor(dev kernels.Backend, hb kernels.Backend, n int) (*hostSide, error) {
	if h := m.host; h != nil && h.b == hb && h.cap >= n {
		return h, nil
	}
	if m.host != nil {
		n = max(n, m.host.cap)
		// The last stretch's copy back to the device may still read the
		// pinned buffer about to be freed.
		if err := dev.Device().Compute().Synchronize(); err != nil {
			return nil, err
		}
	}
	m.freeHostSide()
	ws, err := m.allocWorkspace(hb, n, 1)
	if err != nil {
		return nil, fmt.Errorf("decoder: host workspace: %w", err)
	}
	ws.onHost = true
	pinned, err := dev.Device().AllocHost(int64(n)*m.HiddenStateBytes(), "host stretch residual")
	if err != nil {
		ws.free()
		return nil, fmt.Errorf("decoder: host stretch buffer: %w", err)
	}
	m.host = &hostSide{b: hb, ws: ws, pinned: pinned, cap: n}
	return m.host, nil
}

// runLayers runs the layers over x[T,D]: each with b, or the stretches the
// offload plan computes on the host with the host backend. lr, when set,
// is how the last layer goes on past attention (lastrows.go), where it
// runs on the device.
func (m *Model) runLayers(b kernels.Backend, w *workspace, x *runtime.Tensor, cache Cache, lr *lastRows) error {
	tree := m.Node().Tree()
	defer func() { w.last = nil }()
	final := m.Layers[len(m.Layers)-1]
	if !tree.HasHooks() {
		if kc, ok := cache.(*KVCache); ok && kc.host != nil {
			if err := kc.host.releaseAll(); err != nil { // the engine that placed layers on the host is gone
				return err
			}
		}
		for _, l := range m.Layers {
			if l == final {
				w.last = lr
			}
			if err := l.Forward(b, w, x, cache); err != nil {
				return err
			}
		}
		return nil
	}
	var (
		h      *hostSide
		hx     *runtime.Tensor
		hcache Cache
		in     bool // inside a host stretch
	)
	T := x.Dim(0)
	for _, l := range m.Layers {
		hb := tree.RunsOn(l)
		if hb != nil && !in {
			if h == nil {
				var err error
				if h, err = m.hostSideFor(b, hb, T); err != nil {
					return err
				}
				if hcache, err = hostCacheOf(cache, hb); err != nil {
					return err
				}
				// Every host layer's KV storage now, before the
				// stretch's first layer runs (and is timed).
				if err := hcache.(*hostKV).ensureAll(m.Layers, tree.RunsOn); err != nil {
					return err
				}
				// That asked about every layer: ask again about l,
				// the one entered next (the engine expects the
				// question just before the unit's entry).
				tree.RunsOn(l)
				hx = rows(h.ws.x, T)
			}
			if err := m.toHost(b, h, x, hx); err != nil {
				return err
			}
			in = true
		}
		if hb == nil && in {
			if err := m.toDevice(b, h, hx, x); err != nil {
				return err
			}
			in = false
		}
		if in {
			if err := l.Forward(hb, h.ws, hx, hcache); err != nil {
				return err
			}
			continue
		}
		if kc, ok := cache.(*KVCache); ok && kc.host != nil {
			if err := kc.host.release(l.Index); err != nil { // it ran on the host before
				return err
			}
		}
		if l == final {
			w.last = lr
		}
		if err := l.Forward(b, w, x, cache); err != nil {
			return err
		}
	}
	if in {
		return m.toDevice(b, h, hx, x)
	}
	return nil
}

// toDevice copies the host stretch's residual stream hx back into x.
func (m *Model) toDevice(b kernels.Backend, h *hostSide, hx, x *runtime.Tensor) error {
	n := x.NumBytes()
	copy(h.pinned.Bytes()[:n], hx.Bytes())
	return b.Device().Compute().CopyH2D(x.Buffer(), x.Offset(), h.pinned, 0, n)
}

// hostKV is the host-side KV storage of a KVCache's host-placed layers,
// made for every host layer at a forward's first host stretch (ensureAll;
// per layer at its first host forward under FT_HOST_KV=heap). Its positions are the parent's:
// Len, Cap and Commit are the parent cache's (Forward commits that). A
// layer's positions live where it last ran: one moving to the host (a plan
// switch mid-sequence) brings its cached positions along (fill), and one
// moving back to the device takes them back (release).
type hostKV struct {
	parent *KVCache
	b      kernels.Backend
	k, v   map[int]*runtime.Tensor
	pools  map[int]*kvcache.HostPools // a layer's k and v storage, mapped outside the Go heap (hostkv.go); nil entries under FT_HOST_KV=heap
}

// hostCacheOf returns cache's host side for hb.
func hostCacheOf(cache Cache, hb kernels.Backend) (Cache, error) {
	kc, ok := cache.(*KVCache)
	if !ok {
		return nil, fmt.Errorf("decoder: layers computed on the host need a *decoder.KVCache (from NewKVCache), got %T", cache)
	}
	if kc.host != nil && kc.host.b != hb {
		if err := kc.host.releaseAll(); err != nil {
			return nil, err
		}
		kc.host.free()
		kc.host = nil
	}
	if kc.host == nil {
		kc.host = &hostKV{parent: kc, b: hb, k: map[int]*runtime.Tensor{}, v: map[int]*runtime.Tensor{}, pools: map[int]*kvcache.HostPools{}}
	}
	return kc.host, nil
}

func (c *hostKV) free() {
	for l := range c.k {
		c.drop(l)
	}
}

func (c *hostKV) drop(layer int) {
	if hp := c.pools[layer]; hp != nil {
		hp.Free()
	} else if t := c.k[layer]; t != nil {
		t.Buffer().Free()
		c.v[layer].Buffer().Free()
	}
	delete(c.k, layer)
	delete(c.v, layer)
	delete(c.pools, layer)
}

// Len is the parent cache's.
func (c *hostKV) Len() int { return c.parent.Len() }

// Cap is the parent cache's.
func (c *hostKV) Cap() int { return c.parent.Cap() }

// Append stores layer's k, v at Len(), allocating the layer's host storage
// (and bringing its cached positions over) at its first use.
func (c *hostKV) Append(b kernels.Backend, layer int, k, v *runtime.Tensor) error {
	if err := c.ensure(layer); err != nil {
		return err
	}
	if err := b.StoreKV(c.k[layer], k, c.Len()); err != nil {
		return err
	}
	return b.StoreKV(c.v[layer], v, c.Len())
}

// ensure allocates layer's host storage and brings its cached positions
// over: for every host layer at once from ensureAll, or at the layer's
// first use on the host (FT_HOST_KV=heap).
func (c *hostKV) ensure(layer int) error {
	if c.k[layer] == nil {
		kt, vt, err := c.alloc(layer)
		if err != nil {
			return err
		}
		c.k[layer], c.v[layer] = kt, vt
		if err := c.move(layer, true); err != nil {
			c.drop(layer)
			return err
		}
	}
	return nil
}

// release moves layer's positions back to the device cache and drops its
// host storage (the layer runs on the device again).
func (c *hostKV) release(layer int) error {
	if c.k[layer] == nil {
		return nil
	}
	err := c.move(layer, false)
	c.drop(layer)
	return err
}

// releaseAll releases every host layer.
func (c *hostKV) releaseAll() error {
	for l := range c.k {
		if err := c.release(l); err != nil {
			return err
		}
	}
	return nil
}

// move copies the first Len() positions of layer between the device cache
// and the host storage (toHost: device → host), converting BF16 ↔ F32
// where the backends' activation dtypes differ.
func (c *hostKV) move(layer int, toHost bool) error {
	if c.Len() == 0 {
		return nil
	}
	for _, pair := range [][2]*runtime.Tensor{{c.parent.K[layer], c.k[layer]}, {c.parent.V[layer], c.v[layer]}} {
		d, h := pair[0], pair[1]
		per := d.NumBytes() / int64(d.Dim(0))
		n := int64(c.Len()) * per
		hn := int64(c.Len()) * (h.NumBytes() / int64(h.Dim(0)))
		tmp, err := d.Device().AllocHost(n, "host kv move")
		if err != nil {
			return err
		}
		cs := d.Device().Compute()
		if toHost {
			if err = cs.CopyD2H(tmp, 0, d.Buffer(), d.Offset(), n); err == nil {
				err = cs.Synchronize()
			}
			if err == nil {
				err = runtime.Convert(h.Bytes()[:hn], h.DType(), tmp.Bytes(), d.DType())
			}
		} else {
			err = runtime.Convert(tmp.Bytes(), d.DType(), h.Bytes()[:hn], h.DType())
			if err == nil {
				err = cs.CopyH2D(d.Buffer(), d.Offset(), tmp, 0, n)
			}
			if err == nil {
				err = cs.Synchronize()
			}
		}
		tmp.Free()
		if err != nil {
			return fmt.Errorf("decoder: moving kv cache layer %d (%d positions) between device and host: %w", layer, c.Len(), err)
		}
	}
	return nil
}

// View is layer's host keys and values.
func (c *hostKV) View(layer int) (k, v *runtime.Tensor) { return c.k[layer], c.v[layer] }

// Commit does nothing: Forward commits the parent.
func (c *hostKV) Commit(int) error { return nil }

// Truncate does nothing: the parent's Truncate sets the length.
func (c *hostKV) Truncate(int) error { return nil }
