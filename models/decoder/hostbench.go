package decoder

import (
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// HostLayerBench is one decoder layer of the Llama-3-8B shape (or its
// widths divided by a scale), bound to random BF16 weights on a host
// backend's CPU device, with a host KV cache holding a context of
// positions: what a host-placed layer of an offload plan runs each decode
// step, with nothing of the GPU. `infer bench-host --layer` and
// BenchmarkHostLayer time it.
type HostLayerBench struct {
	m      *Model
	b      kernels.Backend
	ws     *workspace
	x      *runtime.Tensor
	cache  Cache
	kc     *KVCache
	cur    int                     // the layer the next step runs (steps rotate over the layers)
	blocks []*runtime.DeviceBuffer // each layer's weight block
	frees  []func()                // the blocks' allocators' own releases
}

// HostLayerBenchConfig is what NewHostLayerBenchWith builds.
type HostLayerBenchConfig struct {
	// Scale divides the Llama-3-8B widths (HostLayerShape); 0 means 1.
	Scale int
	// Context is the positions held in each layer's host KV cache.
	Context int
	// Layers is the number of distinct layers (each its own weights and
	// KV cache) the steps rotate over; 0 means 1. With several, no step
	// finds the weights a previous step read in the CPU's caches, as in a
	// host stretch of an offload plan, where each host layer is read once
	// a token.
	Layers int
	// Alloc, when set, gives each layer's weight block (all its
	// parameters at 256-byte aligned offsets, as the offload engine packs
	// a unit) as a buffer of the host backend's device, and a release to
	// call after the buffer is freed (nil: none). Unset: the device's
	// Alloc (Go heap memory on a CPU device).
	Alloc func(bytes int64, label string) (buf *runtime.DeviceBuffer, release func(), err error)
}

// HostLayerShape is the benchmark layer's configuration: Llama-3-8B's
// (hidden 4096, intermediate 14336, 32 heads, 8 KV heads of 128; 436 MB of
// BF16 weights) with the widths divided by scale (1: the full shape).
func HostLayerShape(scale int) (Config, error) {
	if scale <= 0 || 4096%scale != 0 || 14336%scale != 0 || 32%scale != 0 {
		return Config{}, fmt.Errorf("decoder: host layer scale %d: want a positive divisor of 32", scale)
	}
	return Config{
		HiddenSize: 4096 / scale, IntermediateSize: 14336 / scale, NumHiddenLayers: 1,
		NumAttentionHeads: 32 / scale, NumKeyValueHeads: 8 / min(scale, 8), HeadDim: 128,
		VocabSize: 256, MaxPositionEmbeddings: 8192, RMSNormEps: 1e-5,
		Rope: Rope{Theta: 500000, Type: "default"}, BOSTokenID: -1,
	}, nil
}

// NewHostLayerBench builds the benchmark layer at scale (HostLayerShape)
// on hb (a backend of a CPU device, e.g. the host backend) with ctx
// positions in its host KV cache. Close frees it.
func NewHostLayerBench(hb kernels.Backend, scale, ctx int) (*HostLayerBench, error) {
	return NewHostLayerBenchWith(hb, HostLayerBenchConfig{Scale: scale, Context: ctx})
}

// hostBenchAlign is the offset alignment of the parameters in a layer's
// weight block (the offload engine's blockAlign).
const hostBenchAlign = 256

// NewHostLayerBenchWith builds c.Layers benchmark layers at c.Scale on hb
// (a backend of a CPU device) with c.Context positions in each layer's
// host KV cache, each layer's weights one block from c.Alloc. The layers
// hold the same random values (the first layer's, copied). Close frees
// it.
func NewHostLayerBenchWith(hb kernels.Backend, c HostLayerBenchConfig) (*HostLayerBench, error) {
	scale, n, ctx := max(c.Scale, 1), max(c.Layers, 1), c.Context
	if c.Scale < 0 || c.Layers < 0 {
		return nil, fmt.Errorf("decoder: host layer bench: scale %d, %d layers: want ≥ 0", c.Scale, c.Layers)
	}
	cfg, err := HostLayerShape(scale)
	if err != nil {
		return nil, err
	}
	cfg.NumHiddenLayers = n
	if ctx < 0 || ctx+1 > cfg.MaxPositionEmbeddings {
		return nil, fmt.Errorf("decoder: host layer context %d: want 0..%d", ctx, cfg.MaxPositionEmbeddings-1)
	}
	names := Names{
		Embed: "model.embed_tokens", Layers: "model.layers", Norm: "model.norm", Head: "lm_head",
		InputNorm: "input_layernorm", Attn: "self_attn", PostNorm: "post_attention_layernorm", MLP: "mlp",
		Q: "q_proj", K: "k_proj", V: "v_proj", O: "o_proj", Gate: "gate_proj", Up: "up_proj", Down: "down_proj",
	}
	m, err := New(&cfg, names)
	if err != nil {
		return nil, err
	}
	dev := hb.Device()
	alloc := c.Alloc
	if alloc == nil {
		alloc = func(bytes int64, label string) (*runtime.DeviceBuffer, func(), error) {
			b, err := dev.Alloc(bytes, label)
			return b, nil, err
		}
	}
	h := &HostLayerBench{m: m, b: hb}
	fail := func(err error) (*HostLayerBench, error) {
		h.Close()
		return nil, err
	}
	shapes := m.ParamShapes()
	for li, l := range m.Layers {
		ps := nn.Parameters(l)
		offs := make([]int64, len(ps))
		var size int64
		for i, p := range ps {
			offs[i] = size
			size += (int64(shapes[p.Name()].NumElements())*int64(runtime.BF16.Size()) + hostBenchAlign - 1) / hostBenchAlign * hostBenchAlign
		}
		buf, release, err := alloc(size, fmt.Sprintf("host layer bench layer %d", li))
		if err != nil {
			return fail(err)
		}
		h.blocks, h.frees = append(h.blocks, buf), append(h.frees, release)
		if buf.Device() != dev || int64(len(buf.Bytes())) < size {
			return fail(fmt.Errorf("decoder: host layer bench: layer %d's block is not %s of host memory of %s", li, runtime.FormatBytes(size), dev.Name()))
		}
		for i, p := range ps {
			t, err := runtime.TensorOn(buf, offs[i], runtime.BF16, shapes[p.Name()])
			if err != nil {
				return fail(err)
			}
			if li == 0 {
				hs := fnv.New64a()
				hs.Write([]byte(p.Name()))
				kind := randMatrix
				if len(t.Shape()) == 1 {
					kind = randNorm
				}
				fillRandomBF16(t.Bytes(), hs.Sum64(), kind, t.Shape())
			}
			if err := p.Bind(t); err != nil {
				return fail(err)
			}
		}
		if li > 0 {
			copy(buf.Bytes()[:size], h.blocks[0].Bytes()[:size])
		}
	}
	cb, err := kernels.NewCPUBackend(dev)
	if err != nil {
		return fail(err)
	}
	if h.kc, err = m.NewKVCache(cb, ctx+1); err != nil {
		return fail(err)
	}
	for _, t := range append(slices.Clone(h.kc.K), h.kc.V...) {
		v := t.F32()
		for i := range v {
			v[i] = float32(i%97)/97 - 0.5
		}
	}
	if err := h.kc.Commit(ctx); err != nil {
		return fail(err)
	}
	if h.cache, err = hostCacheOf(h.kc, hb); err != nil {
		return fail(err)
	}
	if h.ws, err = m.allocWorkspace(hb, 1, 1); err != nil {
		return fail(err)
	}
	h.ws.onHost = true
	h.x = rows(h.ws.x, 1)
	h.resetX()
	// Each layer's host cache is allocated at its first use.
	for range n {
		if err := h.Step(); err != nil {
			return fail(err)
		}
	}
	return h, nil
}

// Layers is the number of distinct layers the steps rotate over.
func (h *HostLayerBench) Layers() int { return len(h.m.Layers) }

// WeightBlocks is each layer's weight block (the parameters at 256-byte
// aligned offsets).
func (h *HostLayerBench) WeightBlocks() []*runtime.DeviceBuffer { return h.blocks }

// next returns the layer the step runs and moves on to the next one.
func (h *HostLayerBench) next() *Layer {
	l := h.m.Layers[h.cur]
	h.cur = (h.cur + 1) % len(h.m.Layers)
	return l
}

// Close frees the workspace, the caches and the weight blocks.
func (h *HostLayerBench) Close() {
	for i, b := range h.blocks {
		b.Free()
		if f := h.frees[i]; f != nil {
			f()
		}
	}
	h.blocks, h.frees = nil, nil
	if h.ws != nil {
		h.ws.free()
		h.ws = nil
	}
	if h.kc != nil {
		if h.kc.host != nil {
			h.kc.host.free()
		}
		h.kc = nil
	}
}

// Step runs the next layer (the steps rotate over the layers) on one
// token at the cache's position (the cache is not committed, so every
// step is the same) as a host-placed layer runs: one op where the backend
// has kernels.DecodeLayerer, else the separate ops. It puts the input back
// after the step, so every step is alike.
func (h *HostLayerBench) Step() error {
	if err := h.next().Forward(h.b, h.ws, h.x, h.cache); err != nil {
		return err
	}
	h.resetX()
	return nil
}

// resetX puts back the token's input the constructor wrote: the step added
// the layer's output into x.
func (h *HostLayerBench) resetX() {
	xv := h.x.F32()
	for i := range xv {
		xv[i] = float32(i%13)/13 - 0.5
	}
}

// StepSeparate runs the next layer's separate ops (never the one-op path).
func (h *HostLayerBench) StepSeparate() error {
	l := h.next()
	if err := l.body(h.b, h.ws, h.x, h.cache); err != nil {
		return err
	}
	h.resetX()
	return nil
}

// StepStages runs the one-op path with per-stage timing added to st; it
// fails when the backend runs no such op.
func (h *HostLayerBench) StepStages(st *kernels.DecodeStages) error {
	ran, err := h.next().decodeLayer(h.b, h.ws, h.x, h.cache, st)
	if err != nil {
		return err
	}
	if !ran {
		return errors.New("decoder: the backend runs no one-op decode layer (kernels.DecodeLayerer off or absent)")
	}
	h.resetX()
	return nil
}

// StepGEMVs runs the layer's GEMVs alone, as the layer issues them (fused
// q/k/v, o, fused gate·up, down; where the backend fuses them): the floor
// the layer is measured against.
func (h *HostLayerBench) StepGEMVs() error {
	l, w, b := h.next(), h.ws, h.b
	hh, q, k, v, att, o := rows(w.h, 1), rows(w.q, 1), rows(w.k, 1), rows(w.v, 1), rows(w.att, 1), rows(w.o, 1)
	g, u := rows(w.gate, 1), rows(w.up, 1)
	mm := func(outs []*runtime.Tensor, x *runtime.Tensor, ws ...*runtime.Tensor) error {
		if f, ok := b.(kernels.MultiMatMuler); ok {
			return f.MatMulN(outs, x, ws)
		}
		for i := range ws {
			if err := b.MatMul(outs[i], x, ws[i]); err != nil {
				return err
			}
		}
		return nil
	}
	if err := mm([]*runtime.Tensor{q, k, v}, hh, l.Attn.Q.Weight.Tensor(), l.Attn.K.Weight.Tensor(), l.Attn.V.Weight.Tensor()); err != nil {
		return err
	}
	if err := b.MatMul(o, att, l.Attn.O.Weight.Tensor()); err != nil {
		return err
	}
	if err := mm([]*runtime.Tensor{g, u}, hh, l.MLP.Gate.Weight.Tensor(), l.MLP.Up.Weight.Tensor()); err != nil {
		return err
	}
	return b.MatMul(o, g, l.MLP.Down.Weight.Tensor())
}

// WeightBytes is one layer's matrix bytes.
func (h *HostLayerBench) WeightBytes() int64 {
	var n int64
	for _, p := range nn.Parameters(h.m.Layers[0]) {
		if t := p.Peek(); len(t.Shape()) == 2 {
			n += t.NumBytes()
		}
	}
	return n
}

// HostLayerTimes are a host layer benchmark's figures: per step, the
// median over the timed steps of the layer as it runs (Layer), of its
// separate ops (Separate), of its GEMVs alone (GEMVs), and each stage's
// median over the one-op path's steps (Stages, Steps the steps timed; 0
// when the backend runs no one-op layer).
type HostLayerTimes struct {
	Layer, Separate, GEMVs time.Duration
	Stages                 kernels.DecodeStages
	Bytes                  int64 // the layer's matrix bytes
	// The bytes of each GEMV stage's weights (q/k/v, o, gate·up, down).
	QKVBytes, OBytes, GateUpBytes, DownBytes int64
}

// Measure times iters steps of each kind (after one untimed step each),
// interleaved so that a noisy machine disturbs them alike.
func (h *HostLayerBench) Measure(iters int) (HostLayerTimes, error) {
	if iters < 1 {
		return HostLayerTimes{}, fmt.Errorf("decoder: host layer bench: %d iterations, want ≥ 1", iters)
	}
	_, staged := h.b.(kernels.DecodeLayerer)
	kinds := []func() error{h.Step, h.StepSeparate, h.StepGEMVs}
	var stages [kernels.NumDecodeStages][]time.Duration
	if staged {
		kinds = append(kinds, func() error {
			var st kernels.DecodeStages
			if err := h.StepStages(&st); err != nil {
				if st.Steps == 0 && len(stages[0]) == 0 {
					staged = false // declined (switched off): no stage table
					return nil
				}
				return err
			}
			for s, t := range st.Time {
				stages[s] = append(stages[s], t)
			}
			return nil
		})
	}
	samples := make([][]time.Duration, len(kinds))
	for it := -1; it < iters; it++ {
		for i, f := range kinds {
			t0 := time.Now()
			if err := f(); err != nil {
				return HostLayerTimes{}, err
			}
			if it >= 0 {
				samples[i] = append(samples[i], time.Since(t0))
			}
		}
		if it == -1 {
			stages = [kernels.NumDecodeStages][]time.Duration{}
		}
	}
	med := func(s []time.Duration) time.Duration {
		slices.Sort(s)
		return s[len(s)/2]
	}
	l := h.m.Layers[0]
	nb := func(ls ...*nn.Linear) int64 {
		var n int64
		for _, li := range ls {
			n += li.Weight.Tensor().NumBytes()
		}
		return n
	}
	r := HostLayerTimes{Layer: med(samples[0]), Separate: med(samples[1]), GEMVs: med(samples[2]), Bytes: h.WeightBytes(),
		QKVBytes: nb(l.Attn.Q, l.Attn.K, l.Attn.V), OBytes: nb(l.Attn.O), GateUpBytes: nb(l.MLP.Gate, l.MLP.Up), DownBytes: nb(l.MLP.Down)}
	if staged && len(stages[0]) > 0 {
		r.Stages.Steps = len(stages[0])
		for s := range stages {
			r.Stages.Time[s] = med(stages[s])
		}
	}
	return r, nil
}
