package decoder

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/place"
	"github.com/flextensor-go/flextensor/runtime"
)

// LoadCheckpoint opens the safetensors weights of the checkpoint in dir and
// binds m's parameters to them on dev (BindCheckpoint). On the CPU the
// weights stay in the mmapped files (zero copy); elsewhere they are
// uploaded. Close the model, then the checkpoint, when done; after an error
// nothing stays open or allocated.
func (m *Model) LoadCheckpoint(dir string, dev runtime.Device) (*loader.Checkpoint, error) {
	ck, err := loader.OpenCheckpoint(dir)
	if err != nil {
		return nil, err
	}
	if err := m.BindCheckpoint(ck, dev); err != nil {
		m.Close()
		ck.Close()
		return nil, err
	}
	return ck, nil
}

// SupportedWeightDType reports whether the kernels take weights of dtype d.
func SupportedWeightDType(d runtime.DType) bool {
	return d == runtime.BF16 || d == runtime.F16 || d == runtime.F32
}

// BindCheckpoint binds every parameter to the checkpoint tensor of the same
// name on dev, checking shapes and dtypes. Errors name the tensor and the
// checkpoint directory; nothing stays allocated after an error.
func (m *Model) BindCheckpoint(ck *loader.Checkpoint, dev runtime.Device) error {
	shapes := m.ParamShapes()
	if err := m.checkDTypes(ck.Info, "checkpoint "+ck.Dir()); err != nil {
		m.Close()
		return err
	}
	if missing := m.MissingTensors(ck); len(missing) > 0 {
		m.Close()
		return missingError(ck, missing, &m.Cfg)
	}
	// After the dtype and missing-tensor checks, which name the more
	// specific cause (FP8 weights without a quantization_config, a scale
	// layout that does not match it).
	if err := m.checkUnused(ck); err != nil {
		m.Close()
		return err
	}
	w, err := place.Bind(m, ck, dev,
		place.WithShapes(shapes, "the config ("+m.Cfg.Summary()+")"),
		place.WithDTypes(func(d runtime.DType) bool { return SupportedWeightDType(d) || d == runtime.F8E4M3 },
			"the kernels take BF16, F16 or F32 weights, or F8_E4M3 ones with a quantization_config"))
	if err != nil {
		m.Close()
		return err
	}
	m.owned = append(m.owned, w.Buffers()...)
	return nil
}

// UnusedTensors lists the checkpoint tensors no parameter of m binds
// (sorted), leaving out those transformers also ignores: rotary_emb.inv_freq
// buffers of older checkpoints, and the LM head of a model whose config ties
// it to the embeddings.
func (m *Model) UnusedTensors(ck *loader.Checkpoint) []string {
	used := map[string]bool{}
	for _, p := range nn.Parameters(m) {
		used[p.Name()] = true
	}
	var out []string
	for _, n := range ck.Names() {
		switch {
		case used[n], strings.HasSuffix(n, ".rotary_emb.inv_freq"):
		case m.Cfg.TieWordEmbeddings && n == m.Names.Head+".weight":
		default:
			out = append(out, n)
		}
	}
	return out
}

// checkUnused refuses a checkpoint with tensors the config does not use
// (more layers than num_hidden_layers, a bias the config does not have):
// running it anyway would silently compute something else.
func (m *Model) checkUnused(ck *loader.Checkpoint) error {
	unused := m.UnusedTensors(ck)
	if len(unused) == 0 {
		return nil
	}
	list := unused
	if len(list) > 8 {
		list = append(slices.Clone(list[:8]), fmt.Sprintf("... (%d more)", len(unused)-8))
	}
	noun, verb := tensorsAre(len(unused))
	return fmt.Errorf("checkpoint %s: %d %s %s not used by its config (%d layers, %s): %s; config.json and the weights disagree",
		ck.Dir(), len(unused), noun, verb, m.Cfg.NumHiddenLayers, m.Cfg.Summary(), strings.Join(list, ", "))
}

// Stop closes the model to new work without freeing its weights: it waits
// for the forward in progress (each forward holds the model's forward
// lock, see Model), marks the model closed, and frees the KV caches of the
// Generate calls in progress, which return their tokens so far with
// ErrClosed at their next step, and of the live Solos. Afterwards
// Generate, Forward, ForwardBatch, CaptureDecode, DecodeGraph steps,
// NewSolo, Solo steps and syncs, NewKVCache and NewPagedCache return
// errors wrapping ErrClosed. A session's Close calls
// it before it releases what the forwards use (an offload engine), then
// Close. It must not be called from inside a forward (an offload hook):
// the forward lock is not re-entrant. Callbacks of Generate (OnToken,
// OnStep) run outside the lock and may call it.
func (m *Model) Stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stop()
}

// stop is Stop with the forward lock held.
func (m *Model) stop() {
	m.closed = true
	for c, steps := range m.live {
		steps.close()
		c.Free()
	}
	m.live = nil
}

// Close frees the weights the model loaded and its workspace, after Stop:
// it waits for the forward in progress and then refuses new ones with
// ErrClosed. A Generate running in another goroutine returns the tokens it
// chose with an error wrapping ErrClosed; its KV cache is freed here. KV
// caches made with NewKVCache and NewPagedCache are the caller's to free.
// The same rule as Stop's: not from inside a forward.
func (m *Model) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stop()
	m.idle.close()
	m.closeGroup()
	m.closeMoETables()
	for _, b := range m.owned {
		b.Free()
	}
	m.owned = nil
	if m.ws != nil {
		m.ws.free()
		m.ws = nil
	}
	m.freeHostSide()
}

// MissingTensors lists the parameters the checkpoint lacks (sorted).
func (m *Model) MissingTensors(ck *loader.Checkpoint) []string {
	have := map[string]bool{}
	for _, n := range ck.Names() {
		have[n] = true
	}
	var out []string
	for _, p := range nn.Parameters(m) {
		if !have[p.Name()] {
			out = append(out, p.Name())
		}
	}
	sort.Strings(out)
	return out
}

// missingError is the error for tensors the config cfg implies that the
// checkpoint lacks: how many, the config's summary, the first four names.
func missingError(ck *loader.Checkpoint, missing []string, cfg *Config) error {
	list := missing
	if len(list) > 4 {
		list = append(list[:4:4], fmt.Sprintf("and %d more", len(missing)-4))
	}
	noun, verb := tensorsAre(len(missing))
	return fmt.Errorf("checkpoint %s: %d %s that the config (%s) implies %s missing: %s",
		ck.Dir(), len(missing), noun, cfg.Summary(), verb, strings.Join(list, ", "))
}

// tensorsAre is the noun and verb for n tensors: "tensor", "is" for one,
// else "tensors", "are".
func tensorsAre(n int) (noun, verb string) {
	if n == 1 {
		return "tensor", "is"
	}
	return "tensors", "are"
}
