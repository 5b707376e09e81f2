package offload

import (
	"errors"
	"fmt"
	"slices"

	"github.com/flextensor-go/flextensor/nn"
)

// StrategyReplanState is the stage of a strategy replan.
type StrategyReplanState string

// The replan states.
const (
	ReplanIdle       StrategyReplanState = "idle"        // never requested
	ReplanInProgress StrategyReplanState = "in_progress" // measuring over the caller's forwards (or replays)
	ReplanDone       StrategyReplanState = "done"        // finished: applied, or refused with the strategy kept
	ReplanFailed     StrategyReplanState = "failed"      // the rebuild failed: inference is unsafe, forwards error
)

// StrategyReplanStatus is a passive snapshot of a manager's replan; reading
// it never arms or advances anything.
type StrategyReplanStatus struct {
	State StrategyReplanState
	// CanRequest tells whether RequestStrategyReplan would be accepted now:
	// in INFERENCE, not in progress, not failed, and not adopted with
	// allowStrategyReplan false.
	CanRequest bool
	// Applied is nil before and during a request, true after a rebuild,
	// false after a refusal (the new plan was not faster) or a failure.
	Applied *bool
}

// ErrReplanRefused is returned by RequestStrategyReplan when it cannot arm.
var ErrReplanRefused = errors.New("strategy replan refused")

// replanWarm is the number of passes a replan lets run before it measures
// (caches and graphs settle).
const replanWarm = 1

type replanState struct {
	state     StrategyReplanState
	applied   *bool
	manual    bool
	remaining int // passes (or replays) still to drive
	measured  int
	lastGen   int
	samples   map[*unit][]float64
	last      map[*unit]float64 // compute of the pass just ended
	freq      freqSamples       // announced units' calls over the measured passes
	lastPass  passCalls         // the calls of the pass just ended
	// RebuildFault, for tests: fails the rebuild with this error.
	fault error
}

// RequestStrategyReplan re-measures each unit's compute under the current
// runtime (compiled units, graphs) over the next forwards and rebuilds the
// plan from those compute times; transfer cost stays on the measured
// size→time curve, and waits are an outcome, not an input. It returns the
// number of forwards (or, with manualUpdateState, UpdateState calls after
// graph replays) to drive. With a manual measure path, forwards do not
// advance the replan: only UpdateState does.
func RequestStrategyReplan(name string, manualUpdateState bool) (int, error) {
	return GetOffloadManager(name).RequestStrategyReplan(manualUpdateState)
}

// GetStrategyReplanStatus reads the named manager's replan status.
func GetStrategyReplanStatus(name string) StrategyReplanStatus {
	return GetOffloadManager(name).StrategyReplanStatus()
}

// RequestStrategyReplan arms a replan (see the package function).
func (m *Manager) RequestStrategyReplan(manualUpdateState bool) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.e == nil {
		return 0, fmt.Errorf("offload manager %q: RequestStrategyReplan: %w", m.name, ErrNotOffloaded)
	}
	e := m.e
	switch {
	case e.noReplan:
		return 0, fmt.Errorf("offload manager %q: %w: the model was adopted with allowStrategyReplan false", m.name, ErrReplanRefused)
	case e.phase != PhaseInference:
		return 0, fmt.Errorf("offload manager %q: %w: the manager is in %v; a replan needs INFERENCE", m.name, ErrReplanRefused, e.phase)
	case e.replan.state == ReplanInProgress:
		return 0, fmt.Errorf("offload manager %q: %w: a replan is already in progress (%d passes to go)", m.name, ErrReplanRefused, e.replan.remaining)
	case e.replan.state == ReplanFailed:
		return 0, fmt.Errorf("offload manager %q: %w: the last replan failed; Release the manager", m.name, ErrReplanRefused)
	}
	n := replanWarm + e.cfg.ProfilingIters
	e.replan = replanState{state: ReplanInProgress, manual: manualUpdateState, remaining: n, lastGen: -1,
		samples: map[*unit][]float64{}, fault: e.replan.fault}
	return n, nil
}

// StrategyReplanStatus returns a snapshot of the replan.
func (m *Manager) StrategyReplanStatus() StrategyReplanStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.e == nil {
		return StrategyReplanStatus{State: ReplanIdle}
	}
	r := m.e.replan
	st := r.state
	if st == "" {
		st = ReplanIdle
	}
	can := m.e.phase == PhaseInference && st != ReplanInProgress && st != ReplanFailed && !m.e.noReplan
	return StrategyReplanStatus{State: st, CanRequest: can, Applied: r.applied}
}

// advanceReplan is UpdateState's part in a manual replan: one replay of the
// given generation (-1 = always new) counts once.
func (e *engine) advanceReplan(gen int) error {
	if e.replan.state != ReplanInProgress || !e.replan.manual {
		return nil
	}
	if gen >= 0 && gen == e.replan.lastGen {
		return nil
	}
	e.replan.lastGen = gen
	return e.replanStep()
}

// replanCollect keeps each unit's compute time of the pass just ended.
func (e *engine) replanCollect() error {
	if err := e.dev.Compute().Synchronize(); err != nil {
		return e.replanFail(err)
	}
	last, err := runSeconds(e.timing.current)
	if err != nil {
		return e.replanFail(err)
	}
	e.replan.lastPass = e.passCalls()
	e.replan.last = last
	return nil
}

// replanStep counts one pass (or replay): after the warm-up it records the
// last pass's compute; after the last it rebuilds.
func (e *engine) replanStep() error {
	r := &e.replan
	pass := replanWarm + e.cfg.ProfilingIters - r.remaining
	if pass >= replanWarm {
		for u, sec := range r.last {
			r.samples[u] = append(r.samples[u], sec)
		}
		r.freq.add(e, r.lastPass)
		r.measured++
	}
	r.remaining--
	if r.remaining > 0 {
		return nil
	}
	return e.rebuild()
}

// rebuild makes a plan from the re-measured compute and applies it when its
// prediction beats the plan in force; otherwise the strategy is kept.
func (e *engine) rebuild() error {
	r := &e.replan
	in := e.planIn
	in.Units = slices.Clone(in.Units)
	for _, u := range e.units {
		if s := r.samples[u]; len(s) > 0 {
			in.Units[u.idx].ComputeSec = median(s)
		}
	}
	r.freq.apply(e, &in)
	// Score the plan in force under the new compute times, so the two
	// predictions compare like with like.
	cur, ok := PredictPlan(in, e.plan)
	plan, err := MakePlan(in)
	if err != nil {
		return e.replanFail(err)
	}
	r.state = ReplanDone
	if ok && plan.PredictedSec >= cur*0.99 {
		no := false
		r.applied = &no
		e.planIn = in // the budgets are updated even when the placement stays
		e.plan.PredictedSec, e.plan.FloorSec = cur, max(e.plan.FloorSec, plan.FloorSec)
		return nil
	}
	if r.fault != nil {
		return e.replanFail(r.fault)
	}
	if err := e.replace(plan); err != nil {
		return e.replanFail(err)
	}
	e.planIn = in
	yes := true
	r.applied = &yes
	return nil
}

func (e *engine) replanFail(err error) error {
	no := false
	e.replan.state, e.replan.applied = ReplanFailed, &no
	return e.fail(fmt.Errorf("strategy replan: %w", err))
}

// replace moves the engine from its plan to p: units that become streamed
// are packed again from their source weights, units that become resident
// are copied up from their host blocks, and the transfer blocks are
// reallocated.
func (e *engine) replace(p Plan) error {
	if err := e.copy.Synchronize(); err != nil {
		return err
	}
	if err := e.dev.Compute().Synchronize(); err != nil {
		return err
	}
	if e.ring != nil {
		e.ring.free()
		e.ring = nil
	}
	if e.pool != nil {
		e.pool.free()
		e.pool = nil
	}
	var toStream []*unit
	for i, u := range e.units {
		if u.resident && !p.Resident[i] {
			toStream = append(toStream, u)
		}
	}
	if err := e.st.packAll(toStream); err != nil {
		return err
	}
	if err := e.rateBlocks(toStream); err != nil {
		return err
	}
	for _, u := range toStream {
		u.dev.Free()
		u.dev = nil
	}
	for i, u := range e.units {
		if !u.resident && p.Resident[i] {
			if err := e.makeResident(u); err != nil {
				return err
			}
		}
	}
	e.plan = p
	e.timing.replacedPlacement()
	return e.allocSlots()
}

// ApplyCompile runs fn on every unit (the seed's compile_fn); the first
// error is returned naming the unit.
func applyCompile(units []*unit, fn CompileFunc) error {
	for _, u := range units {
		if err := fn(u.mod); err != nil {
			return fmt.Errorf("compiling unit %s: %w", u.name, err)
		}
	}
	return nil
}

// ErrNoGraphs is returned by a graph-capturing compiler on a backend that
// cannot capture (the CPU).
var ErrNoGraphs = errors.New("graph capture is not available on this device")

// GraphCompiler returns the runtime's compile function: it needs a device
// whose backend captures CUDA graphs (capture reports whether it can); on the
// CPU it fails with ErrNoGraphs naming the device.
func GraphCompiler(deviceName string, capture func(nn.Module) error) CompileFunc {
	return func(unit nn.Module) error {
		if capture == nil {
			return fmt.Errorf("%w: %s has no graph-capturing backend (build with -tags cuda and use a cuda device)", ErrNoGraphs, deviceName)
		}
		return capture(unit)
	}
}
