package decoder

import (
	"os"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/kvcache"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// Host-placed layers in batched forwards. ForwardBatch asks the module tree
// where each layer runs, as Forward does (hostrun.go): a stretch of host
// layers runs with the host backend on the host workspace, the residual
// stream crossing the link once each way, and reads and writes the keys
// and values of a kvcache.Mirror of the paged cache on the host (the same
// block tables, the host's dtype). Each host layer's new keys and values
// are copied back into the device's pools after it runs
// (kvcache.Mirror.WriteBack), so the device's pools stay complete: a layer
// that moves back to the device, a swap or a Solo reads them there. A
// layer computed on the device tells the mirror which blocks it wrote
// (kvcache.Paged.Wrote), which it copies again before the layer next runs
// on the host.

// batchHostFree reports whether the model's batched forwards keep every
// layer on the device (BatchHostFree, or FT_BATCH_HOST=off): an offload
// engine with a host backend then runs them under plans with no host
// layer.
func (m *Model) batchHostFree() bool {
	return m.BatchHostFree || os.Getenv("FT_BATCH_HOST") == "off"
}

// batchPools is what a batched forward's layers use of the paged pools:
// the cache's own (*kvcache.Paged) or a host copy (*kvcache.Mirror).
type batchPools interface {
	Pools(layer int) (k, v *runtime.Tensor)
	Store(b kernels.Backend, layer int, s *kvcache.Seq, k, v *runtime.Tensor) error
	Gather(b kernels.Backend, layer int, s *kvcache.Seq, n int, k, v *runtime.Tensor) error
}

// on is a copy of bs whose layers use kv (the host's side of a batch):
// the packing and block tables are shared, the attention scratch is not.
func (bs *batchState) on(kv batchPools) *batchState {
	c := *bs
	c.kv, c.kScratch, c.vScratch = kv, nil, nil
	return &c
}

// runBatchLayers runs a batched forward's layers over the packed rows
// x[T,D]: each with b, or, for the stretches the offload plan computes on
// the host, with the host backend over the cache's mirror there. The last
// layer, where it runs on the device, goes on past attention with the
// rows last alone where it can (lastrows.go): then it returns them, their
// residual rows the layer's output.
func (m *Model) runBatchLayers(b kernels.Backend, w *workspace, x *runtime.Tensor, bs *batchState, last []int) (*lastRows, error) {
	tree := m.Node().Tree()
	var (
		h   *hostSide
		hx  *runtime.Tensor
		hbs *batchState
		mi  *kvcache.Mirror
		in  bool // inside a host stretch
		// kept: the rows the last layer goes on with past attention
		// (lastrows.go); nil: every row
		kept *lastRows
		// the packed entries' sequences, first new positions and new
		// positions' counts, for every host layer's write-back
		seqs      []*kvcache.Seq
		pos, news []int
	)
	defer func() {
		if hbs != nil {
			hbs.free()
		}
		w.last = nil
	}()
	asks := tree.HasHooks() && !m.batchHostFree()
	T := x.Dim(0)
	for _, l := range m.Layers {
		var hb kernels.Backend
		if asks {
			hb = tree.RunsOn(l)
		}
		if hb != nil && !in {
			if h == nil {
				var err error
				if h, err = m.hostSideFor(b, hb, T); err != nil {
					return nil, err
				}
				if mi, err = bs.cache.Mirror(hb); err != nil {
					return nil, err
				}
				// Every host layer's copy now, before the stretch's
				// first layer runs (and is timed).
				for _, hl := range m.Layers {
					if tree.RunsOn(hl) != nil {
						if _, _, err := mi.Layer(hl.Index); err != nil {
							return nil, err
						}
					}
				}
				tree.RunsOn(l) // the engine expects the question just before the unit's entry
				hx = rows(h.ws.x, T)
				hbs = bs.on(mi)
				seqs, pos, news = bs.seqs(), bs.firstPos(), bs.news()
			}
			if err := m.toHost(b, h, x, hx); err != nil {
				return nil, err
			}
			in = true
		}
		if hb == nil && in {
			if err := m.toDevice(b, h, hx, x); err != nil {
				return nil, err
			}
			in = false
		}
		if in {
			if _, _, err := mi.Layer(l.Index); err != nil { // up to date already unless the plan changed mid-pass
				return nil, err
			}
			if err := nn.Call(l, func() error { return l.ops(hb, h.ws, hx, nil, hbs) }); err != nil {
				return nil, err
			}
			if err := mi.WriteBack(b, l.Index, seqs, pos, news); err != nil {
				return nil, err
			}
			continue
		}
		bs.cache.Wrote(l.Index, bs.slots)
		if l == m.Layers[len(m.Layers)-1] {
			kept = m.lastRowsFor(b, w, bs, last)
			w.last = kept
		}
		if err := nn.Call(l, func() error { return l.ops(b, w, x, nil, bs) }); err != nil {
			return nil, err
		}
	}
	if in { // the last layer ran on the host, on every row
		return nil, m.toDevice(b, h, hx, x)
	}
	return kept, nil
}

// toHost copies the residual stream x into the host stretch's hx, after
// the device's work so far.
func (m *Model) toHost(b kernels.Backend, h *hostSide, x, hx *runtime.Tensor) error {
	n := x.NumBytes()
	c := b.Device().Compute()
	if err := c.CopyD2H(h.pinned, 0, x.Buffer(), x.Offset(), n); err != nil {
		return err
	}
	if err := c.Synchronize(); err != nil {
		return err
	}
	copy(hx.Bytes(), h.pinned.Bytes()[:n])
	return nil
}

// seqs, firstPos and news are the packed entries' sequences, their first
// new positions and their new positions' counts.
func (bs *batchState) seqs() []*kvcache.Seq {
	s := make([]*kvcache.Seq, len(bs.packed))
	for i, e := range bs.packed {
		s[i] = e.Seq
	}
	return s
}

func (bs *batchState) firstPos() []int {
	p := make([]int, len(bs.packed))
	for i, e := range bs.packed {
		p[i] = e.Seq.Len()
	}
	return p
}

func (bs *batchState) news() []int {
	n := make([]int, len(bs.packed))
	for i, e := range bs.packed {
		n[i] = len(e.IDs)
	}
	return n
}
