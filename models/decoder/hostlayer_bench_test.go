package decoder

import (
	"hash/fnv"
	"os"
	"strconv"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/kernels/host"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// hostLayerBench is one host-placed decoder layer of a made shape, bound to
// random BF16 weights on a CPU device, with the host backend, a host
// workspace and a host KV cache (hostKV, as an offload plan uses) holding
// ctx positions.
type hostLayerBench struct {
	m     *Model
	hb    *host.Backend
	ws    *workspace
	x     *runtime.Tensor
	cache Cache
	dev   *runtime.CPUDevice
	kc    *KVCache
}

// benchHostShape is the layer shape of the host-layer benchmarks: Llama-3-8B's
// (hidden 4096, intermediate 14336, 32 heads, 8 KV heads of 128; 436 MB of
// BF16 weights) unless FT_HOSTLAYER_SCALE=s divides the widths by s.
func benchHostShape(b *testing.B) Config {
	s := 1
	if v := os.Getenv("FT_HOSTLAYER_SCALE"); v != "" {
		var err error
		if s, err = strconv.Atoi(v); err != nil || s <= 0 {
			b.Fatalf("FT_HOSTLAYER_SCALE=%q: want a positive integer", v)
		}
	}
	return Config{
		HiddenSize: 4096 / s, IntermediateSize: 14336 / s, NumHiddenLayers: 1,
		NumAttentionHeads: 32 / s, NumKeyValueHeads: 8 / min(s, 8), HeadDim: 128,
		VocabSize: 256, MaxPositionEmbeddings: 8192, RMSNormEps: 1e-5,
		Rope: Rope{Theta: 500000, Type: "default"}, BOSTokenID: -1,
	}
}

func newHostLayerBench(b *testing.B, threads, ctx int) *hostLayerBench {
	cfg := benchHostShape(b)
	names := Names{
		Embed: "model.embed_tokens", Layers: "model.layers", Norm: "model.norm", Head: "lm_head",
		InputNorm: "input_layernorm", Attn: "self_attn", PostNorm: "post_attention_layernorm", MLP: "mlp",
		Q: "q_proj", K: "k_proj", V: "v_proj", O: "o_proj", Gate: "gate_proj", Up: "up_proj", Down: "down_proj",
	}
	m, err := New(&cfg, names)
	if err != nil {
		b.Fatal(err)
	}
	dev := runtime.NewCPU(0)
	b.Cleanup(func() { dev.Close() })
	for _, p := range nn.Parameters(m) {
		shape := m.ParamShapes()[p.Name()]
		t, err := runtime.NewTensor(dev, runtime.BF16, shape, p.Name())
		if err != nil {
			b.Fatal(err)
		}
		h := fnv.New64a()
		h.Write([]byte(p.Name()))
		kind := randMatrix
		if len(shape) == 1 {
			kind = randNorm
		}
		fillRandomBF16(t.Bytes(), h.Sum64(), kind, shape)
		if err := p.Bind(t); err != nil {
			b.Fatal(err)
		}
	}
	hb, err := host.New(dev, host.Options{Threads: threads})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { hb.Close() })
	cb, err := kernels.NewCPUBackend(dev)
	if err != nil {
		b.Fatal(err)
	}
	kc, err := m.NewKVCache(cb, ctx+1)
	if err != nil {
		b.Fatal(err)
	}
	for _, t := range append(kc.K, kc.V...) {
		v := t.F32()
		for i := range v {
			v[i] = float32(i%97)/97 - 0.5
		}
	}
	if err := kc.Commit(ctx); err != nil {
		b.Fatal(err)
	}
	hc, err := hostCacheOf(kc, hb)
	if err != nil {
		b.Fatal(err)
	}
	ws, err := m.allocWorkspace(hb, 1, 1)
	if err != nil {
		b.Fatal(err)
	}
	ws.onHost = true
	b.Cleanup(ws.free)
	x := rows(ws.x, 1)
	xv := x.F32()
	for i := range xv {
		xv[i] = float32(i%13)/13 - 0.5
	}
	return &hostLayerBench{m: m, hb: hb, ws: ws, x: x, cache: hc, dev: dev, kc: kc}
}

// forward runs the layer on one token at position ctx (the cache keeps
// ctx positions: Forward does not commit) and keeps x bounded.
func (h *hostLayerBench) forward(b *testing.B) {
	if err := h.m.Layers[0].Forward(h.hb, h.ws, h.x, h.cache); err != nil {
		b.Fatal(err)
	}
	xv := h.x.F32()
	for i := range 8 {
		xv[i] = float32(i%13)/13 - 0.5
	}
}

// weightBytes is the layer's matrix bytes.
func (h *hostLayerBench) weightBytes() int64 {
	var n int64
	for _, p := range nn.Parameters(h.m.Layers[0]) {
		if t := p.Peek(); len(t.Shape()) == 2 {
			n += t.NumBytes()
		}
	}
	return n
}

func hostBenchThreads() int {
	if v := os.Getenv("FT_HOSTLAYER_THREADS"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			return n
		}
	}
	return 2
}

// BenchmarkHostLayer times one host-placed Llama-3-8B-shape layer at batch
// 1, context 512, on the host backend (2 threads unless
// FT_HOSTLAYER_THREADS), reporting the weights' GB/s.
func BenchmarkHostLayer(b *testing.B) {
	h := newHostLayerBench(b, hostBenchThreads(), 512)
	h.forward(b) // the host cache's first use allocates it
	bytes := h.weightBytes()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		h.forward(b)
	}
	b.ReportMetric(float64(bytes)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}

// BenchmarkHostLayerGEMVs times the same layer's GEMVs alone (fused q/k/v,
// o, fused gate·up, down, as the layer issues them less the SiLU): the
// floor BenchmarkHostLayer is measured against.
func BenchmarkHostLayerGEMVs(b *testing.B) {
	h := newHostLayerBench(b, hostBenchThreads(), 512)
	l := h.m.Layers[0]
	w := h.ws
	hh, q, k, v, att, o := rows(w.h, 1), rows(w.q, 1), rows(w.k, 1), rows(w.v, 1), rows(w.att, 1), rows(w.o, 1)
	g, u := rows(w.gate, 1), rows(w.up, 1)
	bytes := h.weightBytes()
	step := func() {
		err := h.hb.MatMulN([]*runtime.Tensor{q, k, v}, hh, []*runtime.Tensor{l.Attn.Q.Weight.Tensor(), l.Attn.K.Weight.Tensor(), l.Attn.V.Weight.Tensor()})
		if err == nil {
			err = h.hb.MatMul(o, att, l.Attn.O.Weight.Tensor())
		}
		if err == nil {
			err = h.hb.MatMulN([]*runtime.Tensor{g, u}, hh, []*runtime.Tensor{l.MLP.Gate.Weight.Tensor(), l.MLP.Up.Weight.Tensor()})
		}
		if err == nil {
			err = h.hb.MatMul(o, g, l.MLP.Down.Weight.Tensor())
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	step()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		step()
	}
	b.ReportMetric(float64(bytes)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}
