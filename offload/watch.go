package offload

import "github.com/flextensor-go/flextensor/nn"

// Watches reports whether the engine acts on m's forward (nn.Watcher): only
// the root (a pass's start and end) and the units (their copies, waits and
// bindings). A module under a unit may therefore run its children's ops
// fused, skipping their Calls: the unit's weights are bound by the unit's
// entry, and during DISCOVERY the fused op's weight reads still reach the
// read observer through Parameter.Tensor, attributed to the active unit.
func (e *engine) Watches(m nn.Module) bool {
	return m == e.model || e.byMod[m] != nil
}
