package nn

import "github.com/flextensor-go/flextensor/kernels"

// Elsewhere is an optional interface of a Hook: a hook that has some
// modules computed with a backend of its own (the offload engine computes
// the units its plan places on the host CPU with the host backend, over
// weights it binds to host memory). A model's loop over such modules asks
// Tree.RunsOn before each one and, when it gets a backend, runs the module
// with it, on activations and caches on that backend's device.
type Elsewhere interface {
	// RunsOn returns the backend m must be computed with, or nil when m
	// runs with its caller's backend.
	RunsOn(m Module) kernels.Backend
}

// RunsOn asks the tree's hooks where m is computed: the backend of the
// first hook implementing Elsewhere that names one, else nil (m runs with
// the caller's backend). A model that never asks must not be given plans
// that compute modules elsewhere (the offload engine fails such a forward
// with an error naming the module).
func (t *Tree) RunsOn(m Module) kernels.Backend {
	hp := t.hooks.Load()
	if hp == nil {
		return nil
	}
	for _, h := range *hp {
		if e, ok := h.(Elsewhere); ok {
			if b := e.RunsOn(m); b != nil {
				return b
			}
		}
	}
	return nil
}
