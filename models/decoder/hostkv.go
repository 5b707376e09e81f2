package decoder

import (
	"fmt"
	"os"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/kvcache"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// hostKVHeap: FT_HOST_KV=heap keeps the host-placed layers' KV storage on
// the Go heap, each layer's made at its first host forward (the behaviour
// before hostKV.ensureAll and off-heap blocks), for A/B runs. Read once.
var hostKVHeap = os.Getenv("FT_HOST_KV") == "heap"

// ensureAll makes the KV storage of every layer runsOn places on the host,
// all at once when a forward reaches its first host stretch: the
// allocations (and the moves of cached positions) then fall outside the
// layers' timed forwards, and, mapped outside the Go heap (alloc), grow no
// GC heap — one layer's storage at a time on the heap (4 MiB a layer for
// Llama-3-8B at context 512, F32) set off a GC cycle at each doubling of a
// small heap while the first host forwards were being measured.
func (c *hostKV) ensureAll(layers []*Layer, runsOn func(nn.Module) kernels.Backend) error {
	if hostKVHeap {
		return nil
	}
	for _, l := range layers {
		if runsOn(l) != nil {
			if err := c.ensure(l.Index); err != nil {
				return err
			}
		}
	}
	return nil
}

// alloc makes layer's host keys and values, shaped as the parent cache's:
// one block mapped outside the Go heap (kvcache.NewHostPools) where the host
// backend's device can view it, else (or with FT_HOST_KV=heap) two
// tensors of the device.
func (c *hostKV) alloc(layer int) (kt, vt *runtime.Tensor, err error) {
	shape := c.parent.K[layer].Shape()
	dt := c.b.ActDType()
	label := fmt.Sprintf("host kv cache layer %d", layer)
	if hostKVHeap {
		if kt, err = runtime.NewTensor(c.b.Device(), dt, shape, label+" k"); err != nil {
			return nil, nil, err
		}
		if vt, err = runtime.NewTensor(c.b.Device(), dt, shape, label+" v"); err != nil {
			kt.Buffer().Free()
			return nil, nil, err
		}
		return kt, vt, nil
	}
	hp, err := kvcache.NewHostPools(c.b.Device(), dt, shape, label)
	if err != nil {
		return nil, nil, err
	}
	c.pools[layer] = hp
	return hp.K, hp.V, nil
}
