package nn

// Announcer is an optional interface of a Hook: a data-dependent forward (a
// mixture-of-experts layer whose router picks experts per token, a module
// with a conditional branch) tells the hooks which of its children it is about
// to call, in the order it will call them, before it calls any of them. An
// offloading hook uses it to issue those modules' weight copies early.
//
// Announce is advisory: the forward may still call fewer modules than it
// announced (a hook must not fail a pass for that), and a module called
// without being announced must still work (more slowly).
type Announcer interface {
	// Announce says parent's forward will call next, in that order.
	Announce(parent Module, next []Module)
}

// Announce tells every hook installed on parent's tree that implements
// Announcer that parent's forward will call next, in that order. It costs
// nothing when no hook is installed.
func Announce(parent Module, next ...Module) {
	t := parent.Node().tree
	if t == nil || len(next) == 0 {
		return
	}
	hp := t.hooks.Load()
	if hp == nil {
		return
	}
	for _, h := range *hp {
		if a, ok := h.(Announcer); ok {
			a.Announce(parent, next)
		}
	}
}

// ChildAnnouncer is an optional interface of a Module whose forward
// announces (Announce) the children it calls, which children depending on
// the data (a mixture-of-experts block and its experts). AnnouncesChildren
// reports whether it does, so that a hook knows it before any forward: an
// offloading engine checks its device budget at Offload against the plan
// that serves such children from its pool of slots.
type ChildAnnouncer interface {
	AnnouncesChildren() bool
}
