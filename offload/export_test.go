package offload

// PipelineState is the transfer engine's bookkeeping, exported for the
// tests of package offload_test (this file is compiled only with tests).
type PipelineState struct {
	Offloaded bool   // the manager holds a model
	InForward bool   // between the root's entry and exit
	Active    string // the unit being run, "" outside units
	Failed    error  // set once the engine is unusable
	// INFERENCE pipeline counters (over passes) and each transfer slot's
	// latest occupant (a global copy index; -1 for none).
	Issued, Entered, Exited int
	SlotOcc                 []int
	Pending                 int // copy timings not yet consumed
}

// HoldManagerLock locks the named manager's mutex, as a forward pass holds
// it, until the returned function is called.
func HoldManagerLock(name string) (unlock func()) {
	m := GetOffloadManager(name)
	m.mu.Lock()
	return m.mu.Unlock
}

// PipelineStateOf reads the named manager's engine state under its mutex.
func PipelineStateOf(name string) PipelineState {
	m := GetOffloadManager(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.e
	if e == nil {
		return PipelineState{}
	}
	st := PipelineState{Offloaded: true, InForward: e.inForward, Failed: e.failed}
	if e.active != nil {
		st.Active = e.active.name
	}
	if r := e.ring; r != nil {
		st.Issued, st.Entered, st.Exited, st.Pending = r.issued, r.entered, r.exited, len(r.pending)
		st.SlotOcc = append(st.SlotOcc, r.occ...)
	}
	return st
}

// ReplacePlan moves the named manager's engine to plan p as a replan or a
// token-count switch would (tests only).
func ReplacePlan(name string, p Plan) error {
	m := GetOffloadManager(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.e.replace(p); err != nil {
		return err
	}
	m.e.planIn.Budget = max(m.e.planIn.Budget, p.PeakBytes)
	return nil
}

// SetEmbedHost sets FT_EMBED_HOST's switch for a test and returns the undo.
func SetEmbedHost(on bool) (undo func()) {
	old := embedHostOverride
	embedHostOverride = &on
	return func() { embedHostOverride = old }
}

// EmbedHostOn reports FT_EMBED_HOST's switch (false when it is malformed).
func EmbedHostOn() bool {
	on, _ := embedHostOn()
	return on
}

// UnsetEmbedHost makes FT_EMBED_HOST's switch read the environment for a
// test and returns the undo.
func UnsetEmbedHost() (undo func()) {
	old := embedHostOverride
	embedHostOverride = nil
	return func() { embedHostOverride = old }
}

// CopyMeasureOf reports whether the named manager's engine times copies
// beside host units (FT_HOST_COPY_MEASURE as read when it was built).
func CopyMeasureOf(name string) bool {
	m := GetOffloadManager(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.e != nil && m.e.copyMeasure
}

// PreflightFloor is the least budget Offload's pre-flight check holds the
// named manager's budget to (leastPlan), in bytes.
func PreflightFloor(name string) (int64, error) {
	m := GetOffloadManager(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	f, err := m.e.leastPlan()
	return f.bytes, err
}

// PlannerFloor is the planner's floor of in (leastBudget), in bytes.
func PlannerFloor(in PlanInput) int64 { return leastBudget(in).bytes }

// FootprintFloor is the planner's floor (leastBudget) of the units f
// measured, streamed with slots transfer blocks, with f's non-unit weights
// on the device less its mapped tables and the units below announcing
// blocks (f.UnitAnnounced) announced.
func FootprintFloor(f Footprint, slots int) int64 {
	in := PlanInput{FixedBytes: f.FixedBytes - f.HostTableBytes, Slots: slots}
	for i, b := range f.UnitBytes {
		in.Units = append(in.Units, PlanUnit{Name: f.UnitNames[i], Bytes: b, Announced: f.UnitAnnounced[i], Calls: 1})
	}
	return leastBudget(in).bytes
}

// UnitEndEvents is how many events the named manager's engine has
// recorded at unit exits in INFERENCE (exitInference).
func UnitEndEvents(name string) int {
	m := GetOffloadManager(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.e == nil {
		return 0
	}
	return m.e.exitEvents
}
