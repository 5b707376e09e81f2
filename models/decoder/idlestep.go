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

// idleKey is what a recorded step depends on besides the step inputs.
type idleKey struct {
	b     kernels.StepCapturer
	ws    *workspace
	kv    *KVCache
	kbuf  *runtime.DeviceBuffer // kv's first buffer at the recording
	binds uint64
}

// idleStep is the recorded step and what it depends on.
type idleStep struct {
	g      kernels.Graph
	key    idleKey
	logits *runtime.Tensor
	// failed is the key of the last recording that failed, err its error:
	// forwards with that key run eagerly without trying again.
	failed   idleKey
	err      error
	captures int // recordings made (tests)
	replays  int // steps replayed (tests)
}

// idleStep runs the one-token forward of id at pos through the idle step
// graph when it may (inside the root's Call, the forward lock held): ok is
// false, with no error, when the forward must run eagerly (a hook with work
// to do, a backend that cannot record, a cache other than a plain device
// KVCache, a sharded model or one whose experts route on the host, per-layer
// graphs compiled in, switched off, or a recording that failed for these
// operands: IdleStepErr says why).
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
	if m.idle == nil {
		m.idle = &idleStep{}
	}
	s := m.idle
	key := idleKey{b: sc, ws: w, kv: kv, kbuf: kv.bufs[0], binds: tree.BindGeneration()}
	if s.g == nil || s.key != key {
		if s.err != nil && s.failed == key {
			return nil, false, nil
		}
		s.close()
		var logits *runtime.Tensor
		g, err := sc.CaptureStep(func() error {
			var err error
			logits, err = m.body(b, w, cache, []int32{0}, false) // the id only sizes the work
			return err
		})
		if err != nil {
			// The eager forward computes the same: this one and the next
			// ones with these operands run that way.
			s.failed, s.err = key, fmt.Errorf("decoder: recording the one-token step under idle hooks: %w", err)
			return nil, false, nil
		}
		s.g, s.key, s.logits = g, key, logits
		s.failed, s.err = idleKey{}, nil
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
		s.g, s.key, s.logits = nil, idleKey{}, nil
	}
}

// IdleStepErr is why the latest recording of the idle step graph failed
// (the forwards with its operands run eagerly), or nil when the latest
// recording succeeded or none was tried.
func (m *Model) IdleStepErr() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.idle == nil {
		return nil
	}
	return m.idle.err
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
