package llama

import (
	"fmt"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// UnitGraphs returns a per-unit compile function for the offload engine
// (offload.WithCompile(offload.GraphCompiler(dev, llama.UnitGraphs(b)))):
// each decoder layer it is given then runs its one-token forward as a CUDA
// graph of its own, replayed inside the engine's traps, so the engine's
// copies and waits stay outside the graphs and two layers sharing a transfer
// slot never alias inside one graph. A layer captures its graph at its first
// one-token forward and again whenever its weights (a new slot or placement
// after a replan), the KV cache or the model's workspace are other tensors
// than at the capture. Prefills run op by op.
func UnitGraphs(b kernels.Backend) func(nn.Module) error {
	return func(unit nn.Module) error {
		sc, ok := b.(kernels.StepCapturer)
		if !ok {
			return fmt.Errorf("%w: the %T backend on %s cannot record graphs", offload.ErrNoGraphs, b, b.Device().Name())
		}
		l, ok := unit.(*Layer)
		if !ok {
			return fmt.Errorf("llama.UnitGraphs: unit %s is a %T, not a decoder layer", unit.Node().Name(), unit)
		}
		m, ok := l.Node().Tree().Root().(*Model)
		if !ok {
			return fmt.Errorf("llama.UnitGraphs: unit %s is not in a Llama model", l.Node().Name())
		}
		l.graph = &layerGraph{b: sc}
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
	captures int
}

// graphKey is everything a replay depends on besides the step inputs.
type graphKey struct {
	ws      *workspace
	kc, vc  *runtime.DeviceBuffer
	weights *runtime.DeviceBuffer
	wOffset int64
	backend kernels.Backend
}

func (g *layerGraph) close() {
	if g.g != nil {
		_ = g.g.Close()
		g.g = nil
	}
}

// run replays the layer's graph, capturing it first when anything it
// depends on changed.
func (g *layerGraph) run(l *Layer, b kernels.Backend, w *workspace, x, kc, vc *runtime.Tensor, pos0 int) error {
	if b != kernels.Backend(g.b) {
		return l.body(b, w, x, kc, vc, pos0) // another backend: op by op
	}
	wt := l.InputNorm.Weight.Peek()
	key := graphKey{ws: w, kc: kc.Buffer(), vc: vc.Buffer(), weights: wt.Buffer(), wOffset: wt.Offset(), backend: b}
	if g.g == nil || key != g.key {
		g.close()
		gr, err := g.b.CaptureStep(func() error { return l.body(b, w, x, kc, vc, pos0) })
		if err != nil {
			return fmt.Errorf("capturing %s: %w", l.Node().Name(), err)
		}
		g.g, g.key = gr, key
		g.captures++
	}
	return g.g.Replay()
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
