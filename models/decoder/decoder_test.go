package decoder_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/models/llama"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

const tinyDir = "../../testdata/tiny-llama"

func loadTiny(t *testing.T) (*decoder.Model, kernels.Backend, runtime.Device) {
	t.Helper()
	d := devtest.NewCPU(t)
	return testmodel.Load(t, llama.Load, tinyDir, d.Dev), d.Backend, d.Dev
}

// steps runs a prefill of prompt then one-token steps of the given ids over
// cache, returning each forward's last-token logits.
func steps(t *testing.T, m *decoder.Model, b kernels.Backend, cache decoder.Cache, prompt, ids []int32) [][]float32 {
	t.Helper()
	out, err := testmodel.Steps(m, b, cache, prompt, len(ids), func(s int, _ []float32) int32 { return ids[s] })
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// freshSteps runs steps over a fresh KV cache of 16 positions on b,
// freed after.
func freshSteps(t *testing.T, m *decoder.Model, b kernels.Backend, prompt, ids []int32) [][]float32 {
	t.Helper()
	cache, err := m.NewKVCache(b, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Free()
	return steps(t, m, b, cache, prompt, ids)
}

// watchOne is a hook that watches one module, which turns off the fused
// paths that would skip it.
type watchOne struct{ m nn.Module }

func (h watchOne) Enter(nn.Module) error             { return nil }
func (h watchOne) Exit(_ nn.Module, err error) error { return err }
func (h watchOne) Watches(m nn.Module) bool          { return m == h.m }

// appendOnly is a Cache that is not Direct: the attention must go through
// Append (as a paged cache would make it), never write into the view.
type appendOnly struct {
	kv      *decoder.KVCache
	appends int
}

func (c *appendOnly) Len() int             { return c.kv.Len() }
func (c *appendOnly) Cap() int             { return c.kv.Cap() }
func (c *appendOnly) Commit(n int) error   { return c.kv.Commit(n) }
func (c *appendOnly) Truncate(n int) error { return c.kv.Truncate(n) }

func (c *appendOnly) View(layer int) (k, v *runtime.Tensor) { return c.kv.View(layer) }

func (c *appendOnly) Append(b kernels.Backend, layer int, k, v *runtime.Tensor) error {
	c.appends++
	return c.kv.Append(b, layer, k, v)
}

// ropeStorer gives the CPU backend the fused RoPE-and-store op (as RoPE,
// RoPE, StoreKV, StoreKV) and counts it.
type ropeStorer struct {
	kernels.Backend
	calls int
}

func (r *ropeStorer) RoPEStoreKV(q, k, v, kc, vc *runtime.Tensor, pos0 int, invFreq []float32) error {
	r.calls++
	for _, x := range []*runtime.Tensor{q, k} {
		if err := r.RoPE(x, pos0, invFreq); err != nil {
			return err
		}
	}
	if err := r.StoreKV(kc, k, pos0); err != nil {
		return err
	}
	return r.StoreKV(vc, v, pos0)
}

// TestCacheInterface: the forward reaches the cache only through Cache. A
// Direct cache lets a backend with RoPEStoreKV write into the view; a cache
// that is not Direct gets every layer's keys and values through Append;
// the logits are the same either way.
func TestCacheInterface(t *testing.T) {
	m, b, _ := loadTiny(t)
	prompt, ids := []int32{5, 17, 42}, []int32{7, 8, 9}
	L := len(m.Layers)
	run := func(b kernels.Backend, wrap bool) ([][]float32, int) {
		kv, err := m.NewKVCache(b, len(prompt)+len(ids))
		if err != nil {
			t.Fatal(err)
		}
		defer kv.Free()
		var c decoder.Cache = kv
		ao := &appendOnly{kv: kv}
		if wrap {
			c = ao
		}
		out := steps(t, m, b, c, prompt, ids)
		if c.Len() != len(prompt)+len(ids) {
			t.Fatalf("cache holds %d positions after the forwards, want %d", c.Len(), len(prompt)+len(ids))
		}
		return out, ao.appends
	}
	rs := &ropeStorer{Backend: b}
	direct, _ := run(rs, false)
	if rs.calls != L*(1+len(ids)) {
		t.Errorf("RoPEStoreKV ran %d times into a direct cache, want %d", rs.calls, L*(1+len(ids)))
	}
	rs.calls = 0
	paged, appends := run(rs, true)
	if rs.calls != 0 || appends != L*(1+len(ids)) {
		t.Errorf("a cache that is not Direct: %d fused stores, %d appends; want 0 and %d", rs.calls, appends, L*(1+len(ids)))
	}
	for i := range direct {
		if !slices.Equal(direct[i], paged[i]) {
			t.Fatalf("forward %d: logits through Append differ from the direct cache's", i)
		}
	}
	kv, _ := m.NewKVCache(b, 2)
	defer kv.Free()
	if _, err := m.Forward(b, kv, []int32{1, 2, 3}, false); err == nil || !strings.Contains(err.Error(), "capacity 2") {
		t.Errorf("overfull cache: %v", err)
	}
}

// fakeCapturer "records" a step by keeping fn and "replays" it by running
// fn again: on the CPU that recomputes the step with the same tensors, which
// is what a graph replays, so tests can count captures and check results.
type fakeCapturer struct {
	kernels.Backend
	captures int
}

type fakeGraph struct{ fn func() error }

func (g *fakeGraph) Replay() error { return g.fn() }
func (g *fakeGraph) Close() error  { return nil }

func (f *fakeCapturer) CaptureStep(fn func() error) (kernels.Graph, error) {
	f.captures++
	return &fakeGraph{fn}, nil
}

func (f *fakeCapturer) SetStep(ids []int32, pos0 int) error { return nil }

// TestUnitGraphsRecaptureOnRebind: per-layer graphs capture once and are
// replayed; moving any one weight of a layer to other memory (here the
// down projection, not the norm the old check watched) recaptures that layer
// only, and rebinding a weight to where it already is recaptures nothing.
func TestUnitGraphsRecaptureOnRebind(t *testing.T) {
	m, b, dev := loadTiny(t)
	prompt, ids := []int32{5, 17, 42}, []int32{7, 8, 9, 10}
	cache, _ := m.NewKVCache(b, len(prompt)+len(ids))
	defer cache.Free()
	want := steps(t, m, b, cache, prompt, ids)

	fc := &fakeCapturer{Backend: b}
	compile := decoder.UnitGraphs(fc)
	for _, l := range m.Layers {
		if err := compile(l); err != nil {
			t.Fatal(err)
		}
	}
	defer m.DropUnitGraphs()
	cache.Reset()
	got := steps(t, m, fc, cache, prompt, ids[:2])
	if c := m.GraphCaptures(); !slices.Equal(c, []int{1, 1, 1, 1}) {
		t.Fatalf("captures %v after two steps, want one per layer", c)
	}
	// Layer 1's down projection moves to a copy in other memory.
	w := m.Layers[1].MLP.Down.Weight
	cp, err := runtime.NewTensor(dev, w.Peek().DType(), w.Peek().Shape(), "moved down_proj")
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Buffer().Free()
	copy(cp.Bytes(), w.Peek().Bytes())
	if err := w.Bind(cp); err != nil {
		t.Fatal(err)
	}
	// Layer 2's q projection is rebound where it is.
	q := m.Layers[2].Attn.Q.Weight
	if err := q.Bind(q.Peek()); err != nil {
		t.Fatal(err)
	}
	got = append(got, steps(t, m, fc, cache, ids[2:3], ids[3:])...)
	if c := m.GraphCaptures(); !slices.Equal(c, []int{1, 2, 1, 1}) {
		t.Fatalf("captures %v after the rebinds, want only layer 1 recaptured", c)
	}
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Fatalf("forward %d: graph replays differ from eager forwards", i)
		}
	}
}

// TestDecodeGraphRefusesRebound: a decode graph captured before a weight was
// rebound refuses to step.
func TestDecodeGraphRefusesRebound(t *testing.T) {
	m, b, _ := loadTiny(t)
	fc := &fakeCapturer{Backend: b}
	cache, _ := m.NewKVCache(b, 8)
	defer cache.Free()
	if _, err := m.Forward(b, cache, []int32{1, 2}, false); err != nil {
		t.Fatal(err)
	}
	g, err := m.CaptureDecode(fc, cache)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if cache.Len() != 2 {
		t.Fatalf("capture changed the cache length to %d", cache.Len())
	}
	if _, err := g.Step(3); err != nil {
		t.Fatal(err)
	}
	w := m.Layers[3].MLP.Up.Weight
	if err := w.Bind(w.Peek()); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Step(4); err == nil || !strings.Contains(err.Error(), "rebound") {
		t.Fatalf("step after a rebind: %v", err)
	}
}

// TestConfigValidate names each knob that is not implemented or is
// inconsistent with the names table.
func TestConfigValidate(t *testing.T) {
	base := llama.Shapes["deep-test"].Config
	for _, c := range []struct {
		edit func(*decoder.Config)
		want string
	}{
		{func(c *decoder.Config) { c.MLPBias = true }, "MLP bias is not implemented"},
		{func(c *decoder.Config) { c.QKNorm = true }, "q/k norms but the names table does not place them"},
		{func(c *decoder.Config) { c.SlidingWindow = -1 }, "sliding window -1 is negative"},
		{func(c *decoder.Config) { c.NumKeyValueHeads = 3 }, "not divisible"},
		{func(c *decoder.Config) { c.HiddenSize = 0 }, "hidden size"},
	} {
		cfg := base
		c.edit(&cfg)
		if _, err := decoder.New(&cfg, llama.Names); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want one naming %q", err, c.want)
		}
	}
	m, err := decoder.New(&base, llama.Names)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Layers[11].MLP.Down.Weight.Name(); got != "model.layers.11.mlp.down_proj.weight" {
		t.Errorf("name %q", got)
	}
}
