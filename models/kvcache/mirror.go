package kvcache

import (
	"errors"
	"fmt"
	"slices"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/hostmem"
)

// Mirror holds copies of some layers' pools on another backend's device:
// the host CPU's, for the layers an offload plan computes there in a
// batched forward (decoder.Model.ForwardBatch). Its pools have the cache's
// rows (a sequence's position p sits at the same Slot in both) in the
// mirror backend's activation dtype, so the block tables of a forward
// serve both.
//
// The cache's own pools stay complete: a forward that computes a layer on
// the mirror's side stores its new keys and values in the mirror (Store)
// and copies them back into the cache (WriteBack), so that anything else
// reading the cache (the layer back on the device, Swap.Out, a Solo's
// gather) finds them there. The other way round, Layer brings a layer's
// copy up to date before the mirror's side reads it: whole (every block
// some sequence holds) when it is made or after Drop, else the blocks
// written since in the cache (Paged.Store, StoreAt, Swap.In, and what a
// forward computing the layer on the cache's device reports with
// Paged.Wrote: kernels that store into the pools directly are not seen
// otherwise).
type Mirror struct {
	c      *Paged
	b      kernels.Backend
	layers map[int]*mirrorLayer
	// staging for WriteBack: pinned host memory of the cache's device
	// and a device scratch, [rows, K, d] each for keys and values.
	stage   *runtime.HostBuffer
	scratch [2]*runtime.Tensor
	rows    int
}

// mirrorLayer is one mirrored layer's copy.
type mirrorLayer struct {
	k, v  *runtime.Tensor
	pools *HostPools
	stale map[int32]bool // blocks written in the cache since the copy was made
}

// Mirror returns the cache's mirror on b's device, made at the first call;
// a call with another backend drops the mirror made for the first. The
// cache's Close frees it.
func (c *Paged) Mirror(b kernels.Backend) (*Mirror, error) {
	if b == nil {
		return nil, errors.New("kvcache: Mirror on a nil backend")
	}
	if c.bufs == nil {
		return nil, errors.New("kvcache: Mirror of a closed cache")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mirror != nil && c.mirror.b != b {
		c.mirror.free()
		c.mirror = nil
	}
	if c.mirror == nil {
		c.mirror = &Mirror{c: c, b: b, layers: map[int]*mirrorLayer{}}
	}
	return c.mirror, nil
}

// markStale records that blocks were written in the cache from outside the
// forwards (c.mu held).
func (c *Paged) markStale(blocks []int32) {
	if c.mirror == nil {
		return
	}
	for _, ml := range c.mirror.layers {
		for _, b := range blocks {
			ml.stale[b] = true
		}
	}
}

// Wrote tells the cache's mirror, if any, that a forward wrote layer's
// pool rows slots on the cache's device (the layer computed there): its
// copy of their blocks is brought up to date at the next Mirror.Layer.
func (c *Paged) Wrote(layer int, slots []int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mirror == nil {
		return
	}
	ml := c.mirror.layers[layer]
	if ml == nil {
		return
	}
	bs := int32(c.cfg.BlockSize)
	for _, s := range slots {
		ml.stale[s/bs] = true
	}
}

// Backend is the backend whose device holds the mirror's pools.
func (mi *Mirror) Backend() kernels.Backend { return mi.b }

// Mirrored reports whether layer has a copy (made by Layer, not dropped
// since).
func (mi *Mirror) Mirrored(layer int) bool {
	mi.c.mu.Lock()
	defer mi.c.mu.Unlock()
	return mi.layers[layer] != nil
}

// Layer brings layer's copy up to date with the cache (making it at the
// first call, or the first after Drop) and returns its pools. The copies
// run on the cache's compute stream, which Layer waits for.
func (mi *Mirror) Layer(layer int) (k, v *runtime.Tensor, err error) {
	c := mi.c
	if layer < 0 || layer >= c.cfg.Layers {
		return nil, nil, fmt.Errorf("kvcache: Mirror.Layer(%d) of a cache of %d layers", layer, c.cfg.Layers)
	}
	c.mu.Lock()
	ml := mi.layers[layer]
	var blocks []int32
	if ml == nil {
		// Every block some sequence holds (or held: a freed block's rows
		// are written before they are read again).
		free := make(map[int32]bool, len(c.free))
		for _, b := range c.free {
			free[b] = true
		}
		for b := range int32(c.cfg.Blocks) {
			if !free[b] {
				blocks = append(blocks, b)
			}
		}
	} else {
		for b := range ml.stale {
			blocks = append(blocks, b)
		}
		clear(ml.stale)
	}
	c.mu.Unlock()
	if ml == nil {
		shape := c.K[layer].Shape()
		hp, err := NewHostPools(mi.b.Device(), mi.b.ActDType(), shape, fmt.Sprintf("kv cache mirror layer %d", layer))
		if err != nil {
			return nil, nil, err
		}
		ml = &mirrorLayer{k: hp.K, v: hp.V, pools: hp, stale: map[int32]bool{}}
	}
	slices.Sort(blocks)
	if err := mi.fill(layer, ml, blocks); err != nil {
		if mi.layers[layer] == nil {
			ml.pools.Free()
		} else {
			mi.Drop(layer) // part-copied: made whole at the next call
		}
		return nil, nil, fmt.Errorf("kvcache: mirroring layer %d (%d blocks): %w", layer, len(blocks), err)
	}
	c.mu.Lock()
	mi.layers[layer] = ml
	c.mu.Unlock()
	return ml.k, ml.v, nil
}

// mirrorChunkBytes bounds the pinned buffer of one fill copy.
const mirrorChunkBytes = 64 << 20

// fill copies blocks (sorted) of layer from the cache into ml.
func (mi *Mirror) fill(layer int, ml *mirrorLayer, blocks []int32) error {
	if len(blocks) == 0 {
		return nil
	}
	c := mi.c
	bs := int64(c.cfg.BlockSize)
	for kv, pair := range [][2]*runtime.Tensor{{c.K[layer], ml.k}, {c.V[layer], ml.v}} {
		src, dst := pair[0], pair[1]
		srow := src.NumBytes() / int64(src.Dim(0))
		drow := dst.NumBytes() / int64(dst.Dim(0))
		chunk := max(1, mirrorChunkBytes/(bs*srow))
		tmp, err := c.dev.AllocHost(min(chunk, int64(len(blocks)))*bs*srow, "kv cache mirror fill")
		if err != nil {
			return err
		}
		err = blockRuns(blocks, nil, func(lo, hi int) error {
			for a := lo; a < hi; a += int(chunk) {
				b := min(hi, a+int(chunk))
				row0 := int64(blocks[a]) * bs
				n := int64(b-a) * bs
				st := c.dev.Compute()
				if err := st.CopyD2H(tmp, 0, src.Buffer(), src.Offset()+row0*srow, n*srow); err != nil {
					return err
				}
				if err := st.Synchronize(); err != nil {
					return err
				}
				if err := runtime.Convert(dst.Bytes()[row0*drow:(row0+n)*drow], dst.DType(), tmp.Bytes()[:n*srow], src.DType()); err != nil {
					return err
				}
			}
			return nil
		})
		tmp.Free()
		if err != nil {
			return fmt.Errorf("%s pool: %w", [2]string{"key", "value"}[kv], err)
		}
	}
	return nil
}

// Drop forgets layer's copy (it ran on the cache's device, whose writes the
// mirror does not see); the next Layer makes it whole again.
func (mi *Mirror) Drop(layer int) {
	mi.c.mu.Lock()
	ml := mi.layers[layer]
	delete(mi.layers, layer)
	mi.c.mu.Unlock()
	if ml != nil {
		ml.pools.Free()
	}
}

// Pools is layer's copy (nil, nil when it has none): the mirror's side of
// a forward reads and writes these.
func (mi *Mirror) Pools(layer int) (k, v *runtime.Tensor) {
	mi.c.mu.Lock()
	defer mi.c.mu.Unlock()
	if ml := mi.layers[layer]; ml != nil {
		return ml.k, ml.v
	}
	return nil, nil
}

// Store writes layer's new keys and values k, v [T,K,d] (on the mirror's
// device) into its copy at the sequence's positions Len()..Len()+T−1, as
// Paged.Store does into the cache.
func (mi *Mirror) Store(b kernels.Backend, layer int, s *Seq, k, v *runtime.Tensor) error {
	kp, vp := mi.Pools(layer)
	if kp == nil {
		return fmt.Errorf("kvcache: Mirror.Store of layer %d, which has no copy (Mirror.Layer first)", layer)
	}
	return mi.c.storeInto("Mirror.Store", b, kp, vp, layer, s, s.n, k, v)
}

// Gather copies layer's keys and values of the sequence's positions
// 0..n−1 from the copy into rows 0..n−1 of k and v, as Paged.Gather does
// from the cache.
func (mi *Mirror) Gather(b kernels.Backend, layer int, s *Seq, n int, k, v *runtime.Tensor) error {
	kp, vp := mi.Pools(layer)
	if kp == nil {
		return fmt.Errorf("kvcache: Mirror.Gather of layer %d, which has no copy (Mirror.Layer first)", layer)
	}
	return mi.c.gatherFrom(b, kp, vp, layer, s, n, k, v)
}

// WriteBack copies layer's positions pos[i]..pos[i]+news[i]−1 of seqs[i]
// (stored in the copy by the forward in progress) into the cache's own
// pools with dev, the cache's backend: narrowed to the cache's dtype in a
// pinned buffer, one host-to-device copy of all rows and a StoreKV a run
// of consecutive rows, queued on the compute stream. It waits for the
// previous WriteBack's copies first (their pinned buffer is reused).
func (mi *Mirror) WriteBack(dev kernels.Backend, layer int, seqs []*Seq, pos, news []int) error {
	kp, vp := mi.Pools(layer)
	if kp == nil {
		return fmt.Errorf("kvcache: Mirror.WriteBack of layer %d, which has no copy", layer)
	}
	c := mi.c
	T := 0
	for _, n := range news {
		T += n
	}
	if T == 0 {
		return nil
	}
	ck := c.K[layer]
	srow, drow := kp.NumBytes()/int64(kp.Dim(0)), ck.NumBytes()/int64(ck.Dim(0))
	st := c.dev.Compute()
	if err := st.Synchronize(); err != nil {
		return err
	}
	if T > mi.rows {
		if err := mi.grow(T, drow); err != nil {
			return err
		}
	}
	stage := mi.stage.Bytes()
	half := int64(mi.rows) * drow
	r := int64(0)
	for i, s := range seqs {
		err := s.slotRuns(pos[i], news[i], func(p, slot, run int) error {
			for kv, pool := range []*runtime.Tensor{kp, vp} {
				src := pool.Bytes()[int64(slot)*srow : int64(slot+run)*srow]
				dst := stage[int64(kv)*half+r*drow : int64(kv)*half+(r+int64(run))*drow]
				if err := runtime.Convert(dst, ck.DType(), src, pool.DType()); err != nil {
					return err
				}
			}
			r += int64(run)
			return nil
		})
		if err != nil {
			return err
		}
	}
	for kv := range 2 {
		sc := mi.scratch[kv]
		if err := st.CopyH2D(sc.Buffer(), sc.Offset(), mi.stage, int64(kv)*half, int64(T)*drow); err != nil {
			return err
		}
	}
	r0 := 0
	for i, s := range seqs {
		k, err := mi.scratch[0].Slice(r0, r0+news[i])
		if err != nil {
			return err
		}
		v, err := mi.scratch[1].Slice(r0, r0+news[i])
		if err != nil {
			return err
		}
		if err := c.storeInto("Mirror.WriteBack", dev, c.K[layer], c.V[layer], layer, s, pos[i], k, v); err != nil {
			return err
		}
		r0 += news[i]
	}
	return nil
}

// grow makes WriteBack's staging hold rows of drow bytes each (the compute
// stream idle: WriteBack synchronized it).
func (mi *Mirror) grow(rows int, drow int64) error {
	mi.freeStaging()
	c := mi.c
	stage, err := c.dev.AllocHost(2*int64(rows)*drow, "kv cache mirror write-back")
	if err != nil {
		return err
	}
	mi.stage = stage
	shape := runtime.Shape{rows, c.cfg.KVHeads, c.cfg.HeadDim}
	for kv := range 2 {
		if mi.scratch[kv], err = runtime.NewTensor(c.dev, c.K[0].DType(), shape, "kv cache mirror write-back rows"); err != nil {
			mi.freeStaging()
			return err
		}
	}
	mi.rows = rows
	return nil
}

func (mi *Mirror) freeStaging() {
	if mi.stage != nil {
		mi.stage.Free()
		mi.stage = nil
	}
	for kv, t := range mi.scratch {
		if t != nil {
			t.Buffer().Free()
			mi.scratch[kv] = nil
		}
	}
	mi.rows = 0
}

// free releases every copy and the staging (c.mu held, or the cache
// closing).
func (mi *Mirror) free() {
	for l, ml := range mi.layers {
		ml.pools.Free()
		delete(mi.layers, l)
	}
	mi.freeStaging()
}

// HostPools is key and value storage on a host backend's device (a
// Mirror's copy of a layer, a single-sequence cache's host layers).
type HostPools struct {
	K, V *runtime.Tensor
	// Block is the memory mapped outside the Go heap holding K then V; nil
	// when the device could not view it (K and V are then the device's).
	Block *hostmem.Block
}

// NewHostPools makes key and value storage of shape in dt on dev: one
// block mapped outside the Go heap (on huge pages where large enough) when
// dev can view memory it did not allocate, else two tensors of dev.
func NewHostPools(dev runtime.Device, dt runtime.DType, shape runtime.Shape, label string) (*HostPools, error) {
	w, ok := dev.(interface {
		Wrap(data []byte, label string) (*runtime.DeviceBuffer, error)
	})
	if !ok {
		k, err := runtime.NewTensor(dev, dt, shape, label+" k")
		if err != nil {
			return nil, err
		}
		v, err := runtime.NewTensor(dev, dt, shape, label+" v")
		if err != nil {
			k.Buffer().Free()
			return nil, err
		}
		return &HostPools{K: k, V: v}, nil
	}
	per := int64(shape.NumElements()) * int64(dt.Size())
	blk, err := hostmem.Map(2*max(per, 1), hostmem.Options{Huge: 2*per >= hostmem.HugePageSize})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	tensor := func(off int64, kv string) (*runtime.Tensor, error) {
		buf, err := w.Wrap(blk.Bytes()[off:off+per], label+" "+kv)
		if err != nil {
			return nil, err
		}
		t, err := runtime.TensorOn(buf, 0, dt, shape)
		if err != nil {
			buf.Free()
		}
		return t, err
	}
	h := &HostPools{Block: blk}
	if h.K, err = tensor(0, "k"); err != nil {
		blk.Free()
		return nil, err
	}
	if h.V, err = tensor(per, "v"); err != nil {
		h.K.Buffer().Free()
		blk.Free()
		return nil, err
	}
	return h, nil
}

// Free releases the storage.
func (h *HostPools) Free() {
	h.K.Buffer().Free()
	h.V.Buffer().Free()
	if h.Block != nil {
		h.Block.Free()
	}
}
