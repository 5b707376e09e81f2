package nn

// Watcher is an optional interface of a Hook: Watches reports whether the
// hook acts on m's forward (its Enter and Exit do something for m). A hook
// that does not implement it is taken to watch every module.
//
// It decides fusion: a module may run several of its children's ops as one
// fused op, skipping their Calls, only when no hook watches those children
// (Unwatched).
type Watcher interface {
	// Watches reports whether the hook's Enter or Exit acts on m.
	Watches(m Module) bool
}

// Unwatched reports whether no hook installed on the modules' tree watches
// any of ms: their Calls may then be skipped (their ops fused into their
// parent's). Parameter reads still reach the tree's read observer, which
// fused ops that read weights through Parameter.Tensor pass through.
func Unwatched(ms ...Module) bool {
	if len(ms) == 0 {
		return true
	}
	t := ms[0].Node().tree
	if t == nil {
		return true
	}
	hp := t.hooks.Load()
	if hp == nil {
		return true
	}
	for _, h := range *hp {
		w, ok := h.(Watcher)
		if !ok {
			return false
		}
		for _, m := range ms {
			if w.Watches(m) {
				return false
			}
		}
	}
	return true
}

// BindGeneration counts the Parameter.Bind calls on the tree's parameters
// so far. Work recorded against the parameters' tensors (a captured graph)
// compares it with the count at the recording to notice a rebinding.
func (t *Tree) BindGeneration() uint64 { return t.binds.Load() }
