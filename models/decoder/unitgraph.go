package decoder

import (
	"fmt"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// UnitGraphs returns a per-unit compile function for the offload engine
// (offload.WithCompile(offload.GraphCompiler(dev, decoder.UnitGraphs(b)))):
// each decoder layer it is given then runs its one-token forward as a CUDA
// graph of its own, replayed inside the engine's traps, so the engine's
// copies and waits stay outside the graphs and two layers sharing a transfer
// slot never alias inside one graph. A layer captures its graph at its first
// one-token forward and again whenever any of its weights (a new slot or
// placement after a replan), the KV cache or the model's workspace are other
// memory than at the capture, or the backend's one-op layer was switched
// on or off since (kernels.DecodeLayerer.DecodeLayerOn; FT_DECODE_MEGA): after any Parameter.Bind on the tree
// (nn.Tree.BindGeneration) the layer compares every parameter's buffer and
// offset with those it captured. Prefills run op by op.
func UnitGraphs(b kernels.Backend) func(nn.Module) error {
	return func(unit nn.Module) error {
		sc, ok := b.(kernels.StepCapturer)
		if !ok {
			return fmt.Errorf("%w: the %T backend on %s cannot record graphs", offload.ErrNoGraphs, b, b.Device().Name())
		}
		l, ok := unit.(*Layer)
		if !ok {
			return fmt.Errorf("decoder.UnitGraphs: unit %s is a %T, not a decoder layer", unit.Node().Name(), unit)
		}
		m, ok := l.Node().Tree().Root().(*Model)
		if !ok {
			return fmt.Errorf("decoder.UnitGraphs: unit %s is not in a decoder model", l.Node().Name())
		}
		l.graph = &layerGraph{b: sc, params: nn.Parameters(l)}
		m.unitGraphs = sc
		return nil
	}
}

// DropUnitGraphs frees every layer's graph and goes back to op-by-op
// forwards (after the offload engine is released, say).
func (m *Model) DropUnitGraphs() {
	for _, l := range m.Layers {
		if l.graph != nil {
			l.graph.close()
			l.graph = nil
		}
	}
	m.unitGraphs = nil
}

// layerGraph is one layer's captured one-token forward and what it was
// captured with.
type layerGraph struct {
	b        kernels.StepCapturer
	g        kernels.Graph
	key      graphKey
	params   []*nn.Parameter // the layer's
	binds    uint64          // the tree's bind generation when weights were last checked
	weights  []weightAt      // where params were at the capture
	captures int
	op       bool // the graph holds the layer as one DecodeLayer op
}

// graphKey is what a replay depends on besides the step inputs and the
// weights.
type graphKey struct {
	ws      *workspace
	kc, vc  *runtime.DeviceBuffer
	backend kernels.Backend
	layerOp bool // the backend's one-op layer switched on at the capture
}

// weightAt is where a parameter's tensor lives.
type weightAt struct {
	buf *runtime.DeviceBuffer
	off int64
}

// where is where p's tensor is now.
func where(p *nn.Parameter) weightAt {
	if t := p.Peek(); t != nil {
		return weightAt{t.Buffer(), t.Offset()}
	}
	return weightAt{}
}

func (g *layerGraph) close() {
	if g.g != nil {
		_ = g.g.Close()
		g.g = nil
	}
}

// current reports whether the captured graph still matches: the same key,
// and the same weights (checked only when some Bind ran since the last check).
func (g *layerGraph) current(l *Layer, key graphKey) bool {
	if g.g == nil || key != g.key {
		return false
	}
	gen := l.Node().Tree().BindGeneration()
	if gen == g.binds {
		return true
	}
	for i, p := range g.params {
		if where(p) != g.weights[i] {
			return false
		}
	}
	g.binds = gen
	return true
}

// run replays the layer's graph, capturing it first when anything it
// depends on changed.
func (g *layerGraph) run(l *Layer, b kernels.Backend, w *workspace, x *runtime.Tensor, cache Cache) error {
	if b != kernels.Backend(g.b) || l.MoE != nil {
		return l.body(b, w, x, cache) // another backend, or experts routed on the host: op by op
	}
	kc, vc := cache.View(l.Index)
	key := graphKey{ws: w, kc: kc.Buffer(), vc: vc.Buffer(), backend: b}
	if dl, ok := b.(kernels.DecodeLayerer); ok {
		key.layerOp = dl.DecodeLayerOn()
	}
	if !g.current(l, key) {
		g.close()
		binds, weights := l.Node().Tree().BindGeneration(), make([]weightAt, len(g.params))
		for i, p := range g.params {
			weights[i] = where(p)
		}
		g.op = false
		gr, err := g.b.CaptureStep(func() error {
			// The whole layer as one backend op where the backend has one
			// for it (hostlayer.go), else op by op.
			ran, err := l.decodeLayer(b, w, x, cache, nil)
			if ran || err != nil {
				g.op = ran
				return err
			}
			return l.body(b, w, x, cache)
		})
		if err != nil {
			return fmt.Errorf("capturing %s: %w", l.Node().Name(), err)
		}
		g.g, g.key, g.binds, g.weights = gr, key, binds, weights
		g.captures++
	}
	if err := g.g.Replay(); err != nil {
		return err
	}
	if g.op {
		w.normed = tailNormed{} // x changed: no norm of it is pending
	}
	return nil
}

// GraphCaptures reports how many times each layer captured its graph (for
// tests and diagnostics).
func (m *Model) GraphCaptures() []int {
	out := make([]int, len(m.Layers))
	for i, l := range m.Layers {
		if l.graph != nil {
			out[i] = l.graph.captures
		}
	}
	return out
}
