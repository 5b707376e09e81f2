package nn

// HasHooks reports whether any hook is installed on the tree. Callers that
// record a forward once and replay it (a CUDA graph of a decode step) check
// it: a hook's work, such as the offload engine's transfers, must run at every
// forward, not be frozen into a recording.
func (t *Tree) HasHooks() bool {
	hp := t.hooks.Load()
	return hp != nil && len(*hp) > 0
}

// Idler is an optional interface of a Hook: a hook that can say, during a
// forward of the tree's root (between its Enter and Exit for the root, asked
// by the goroutine running that forward), that its traps of every other
// module of this forward would do nothing. The forward's body may then run
// without them: a recorded step replayed inside the root's traps (the
// decoder's step graph under an offload plan that streams nothing and
// measures nothing). The answer holds for the forward it is asked in; the
// next forward asks again.
type Idler interface {
	// InnerTrapsIdle reports whether the hook's Enter and Exit of the
	// modules under the root would do nothing in the forward now running.
	InnerTrapsIdle() bool
}

// InnerTrapsIdle reports whether the tree has hooks and every one is an
// Idler whose traps of the modules under the root do nothing in the
// forward now running: asked inside the root's forward (see Idler). False
// on a tree with no hooks (there is nothing to leave out) and when any
// hook cannot say.
func (t *Tree) InnerTrapsIdle() bool {
	hp := t.hooks.Load()
	if hp == nil || len(*hp) == 0 {
		return false
	}
	for _, h := range *hp {
		if i, ok := h.(Idler); !ok || !i.InnerTrapsIdle() {
			return false
		}
	}
	return true
}
