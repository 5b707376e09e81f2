package nn

// HasHooks reports whether any hook is installed on the tree. Callers that
// record a forward once and replay it (a CUDA graph of a decode step) check
// it: a hook's work, such as the offload engine's transfers, must run at every
// forward, not be frozen into a recording.
func (t *Tree) HasHooks() bool {
	hp := t.hooks.Load()
	return hp != nil && len(*hp) > 0
}
