package decoder

import (
	"fmt"
	"os"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// The idle step graph: a one-token Forward of a model whose tree has hooks
// (an offload engine) normally runs eagerly, op by op, since a hook's work
// (the engine's transfers) must run at every forward. When every hook says
// that in this forward its traps of the layers would do nothing
// (nn.Tree.InnerTrapsIdle: the engine's plan streams nothing, computes
// nothing on the host and measures nothing), the forward's body is
// recorded once as a graph (kernels.StepCapturer) and replayed inside the
// root's traps, which still run: the engine keeps its pass bookkeeping and
// may change its plan at any forward, after which the next forward runs
// eagerly again (or, after a rebinding, records anew). A resident model
// decodes through graphs the same way (Generate's stepper, DecodeGraph);
// an offloaded one whose plan fits the budget now does too. The recording
// depends on the workspace, the KV cache's buffers, the backend and the
// weights' bindings (nn.Tree.BindGeneration); a change of any records
// again. FT_IDLE_STEP_GRAPH=0 (or Model.NoIdleStepGraph) runs such
// forwards eagerly (A/B runs).

// idleStepOff is FT_IDLE_STEP_GRAPH=0.
var idleStepOff = os.Getenv("FT_IDLE_STEP_GRAPH") == "0"

// idleStep is the recorded step and what it depends on.
type idleStep struct {
	g        kernels.Graph
	b        kernels.StepCapturer
	ws       *workspace
	kv       *KVCache
	kbuf     *runtime.DeviceBuffer // kv's first buffer at the recording
	binds    uint64
	logits   *runtime.Tensor
	captures int // recordings made (tests)
	replays  int // steps replayed (tests)
}

// idleStep runs the one-token forward of id at pos through the idle step
// graph when it may (inside the root's Call, the forward lock held): ok is
// false, with no error, when the forward must run eagerly (a hook with work
// to do, a backend that cannot record, a cache other than a plain device
// KVCache, a sharded model or one whose experts route on the host, per-layer
// graphs compiled in, switched off).
func (m *Model) idleStep(b kernels.Backend, w *workspace, cache Cache, id int32, pos int) (*runtime.Tensor, bool, error) {
	sc, ok := b.(kernels.StepCapturer)
	if !ok || idleStepOff || m.NoIdleStepGraph || m.unitGraphs != nil || m.tp != nil || w.onHost {
		return nil, false, nil
	}
	kv, ok := cache.(*KVCache)
	if !ok || kv.host != nil || len(kv.peers) > 0 || len(kv.bufs) == 0 {
		return nil, false, nil
	}
	tree := m.Node().Tree()
	if !tree.InnerTrapsIdle() {
		return nil, false, nil
	}
	if host, err := m.hostRouted(b); err != nil || host {
		return nil, false, err
	}
	s := m.idle
	binds := tree.BindGeneration()
	if s == nil || s.g == nil || s.b != sc || s.ws != w || s.kv != kv || s.kbuf != kv.bufs[0] || s.binds != binds {
		if s == nil {
			s = &idleStep{}
			m.idle = s
		}
		s.close()
		var logits *runtime.Tensor
		g, err := sc.CaptureStep(func() error {
			var err error
			logits, err = m.body(b, w, cache, []int32{0}, false) // the id only sizes the work
			return err
		})
		if err != nil {
			return nil, false, fmt.Errorf("decoder: recording the one-token step under idle hooks: %w", err)
		}
		s.g, s.b, s.ws, s.kv, s.kbuf, s.binds, s.logits = g, sc, w, kv, kv.bufs[0], binds, logits
		s.captures++
	}
	if err := sc.SetStep([]int32{id}, pos); err != nil {
		return nil, false, err
	}
	if err := s.g.Replay(); err != nil {
		return nil, false, err
	}
	s.replays++
	return s.logits, true, nil
}

// close frees the recorded graph (the forward lock held).
func (s *idleStep) close() {
	if s != nil && s.g != nil {
		_ = s.g.Close()
		s.g, s.kv, s.kbuf, s.ws, s.logits = nil, nil, nil, nil, nil
	}
}

// IdleStepCounts reports how many times one-token forwards under idle hooks
// recorded their step graph and how many replayed it (see idlestep.go).
func (m *Model) IdleStepCounts() (captures, replays int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.idle == nil {
		return 0, 0
	}
	return m.idle.captures, m.idle.replays
}
