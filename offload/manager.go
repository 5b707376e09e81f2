// Package offload is the FlexTensor engine: it runs a module tree whose
// weights do not fit the device by keeping what a memory budget allows
// resident and streaming the rest, unit by unit, from (pinned) host memory
// through a ring of transfer blocks, with copies on their own stream hidden
// behind compute.
//
// A manager goes through three phases, advancing after each forward pass of
// the model's root module:
//
//   - DISCOVERY: each unit's weights are copied in before it runs; reads of
//     parameters are recorded, and a parameter read by a unit other than its
//     owner (tied embeddings) is made resident.
//   - PROFILING: each unit's compute time is measured (device events) and the
//     host-to-device size→time curve is measured; then the planner chooses
//     what stays resident.
//   - INFERENCE: the plan runs: resident units stay, streamed units are copied
//     ahead into transfer blocks on the copy stream. A pass of a plan that
//     streams nothing, computes nothing on the host and measures nothing
//     has nothing to do at the units' traps; the engine says so to the model
//     (nn.Idler), and the decoder then replays its one-token step as one
//     recorded graph inside the root's traps (models/decoder/idlestep.go).
//
// Managers are named ("default" is the default). A manager may be used from
// any goroutine: its calls are serialised by a mutex, and a forward pass holds
// the manager from the root module's entry to its exit, so forwards of one
// manager from several goroutines run one after another. (The Python library
// binds a manager to the thread that created it and raises elsewhere; Go has
// no goroutine identity to check, and serialising gives the same guarantee
// that no two calls interleave.)
package offload

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/flextensor-go/flextensor/nn"
)

// DefaultManagerName is the name used when a call gives "".
const DefaultManagerName = "default"

// Phase is a manager's stage.
type Phase int

// The phases, in order.
const (
	PhaseIdle Phase = iota // no model offloaded
	PhaseDiscovery
	PhaseProfiling
	PhaseInference
)

// String names the phase (DISCOVERY, PROFILING, INFERENCE).
func (p Phase) String() string {
	return [...]string{"IDLE", "DISCOVERY", "PROFILING", "INFERENCE"}[p]
}

var (
	registryMu sync.Mutex
	registry   = map[string]*Manager{}
	// offloaded maps each offloaded model's tree to its manager's name.
	offloaded = map[*nn.Tree]string{}
)

// Errors callers can test for with errors.Is.
var (
	ErrNotOffloaded   = errors.New("no model is offloaded by this manager")
	ErrAlreadyOffload = errors.New("model is already offloaded")
	ErrNotInference   = errors.New("manager is not in the INFERENCE phase")
	ErrUnbalanced     = errors.New("ResumeProfiling without a matching SuspendProfiling")
	ErrEngineFailed   = errors.New("offload engine failed; Release the manager")
	// ErrNameInUse: Offload with a manager name that already offloads
	// another model (a manager offloads one model at a time).
	ErrNameInUse       = errors.New("manager name in use")
	ErrNothingIncluded = errors.New("include patterns match no module")
)

func canon(name string) string {
	if name == "" {
		return DefaultManagerName
	}
	return name
}

// GetOffloadManager returns the manager called name ("" = default),
// creating it when new.
func GetOffloadManager(name string) *Manager {
	name = canon(name)
	registryMu.Lock()
	defer registryMu.Unlock()
	m, ok := registry[name]
	if !ok {
		m = &Manager{name: name}
		registry[name] = m
	}
	return m
}

// Init creates (or resets the configuration of) the named manager.
func Init(cfg Config, name string) error { return GetOffloadManager(name).SetConfig(cfg) }

// SetConfig sets the named manager's configuration.
func SetConfig(cfg Config, name string) error { return GetOffloadManager(name).SetConfig(cfg) }

// Offload offloads model with the named manager; cfg, when non-nil, replaces
// the manager's configuration first. See Manager.Offload.
func Offload(model nn.Module, cfg *Config, name string, opts ...Option) error {
	m := GetOffloadManager(name)
	if cfg != nil {
		m.mu.Lock()
		busy := m.e != nil
		m.mu.Unlock()
		if !busy {
			if err := m.SetConfig(*cfg); err != nil {
				return err
			}
		}
	}
	return m.Offload(model, opts...)
}

// Release releases the named manager (see Manager.Release).
func Release(name string, preserveModel bool) error {
	return GetOffloadManager(name).Release(preserveModel)
}

// GetGPUMemoryUsage reports the named manager's device memory (INFERENCE only).
func GetGPUMemoryUsage(name string) (GPUMemoryUsage, error) {
	return GetOffloadManager(name).GPUMemoryUsage()
}

// SuspendProfiling suspends recording on the named manager (reference-counted;
// a no-op when its configuration is disabled).
func SuspendProfiling(name string) { GetOffloadManager(name).SuspendProfiling() }

// ResumeProfiling undoes one SuspendProfiling on the named manager.
func ResumeProfiling(name string) error { return GetOffloadManager(name).ResumeProfiling() }

// PauseProfiling suspends recording on the named manager and returns the
// function that resumes it: defer offload.PauseProfiling("")().
func PauseProfiling(name string) (resume func()) { return GetOffloadManager(name).PauseProfiling() }

// ClearProfilingDurations drops the named manager's compute-time samples.
func ClearProfilingDurations(name string) { GetOffloadManager(name).ClearProfilingDurations() }

// OffloadUnits lists the named manager's streamed units.
func OffloadUnits(name string) []NamedModule { return GetOffloadManager(name).OffloadUnits() }

// ResidentUnits lists the named manager's resident units.
func ResidentUnits(name string) []NamedModule { return GetOffloadManager(name).ResidentUnits() }

// CollectOffloadTiming returns the named manager's timing report (nil when
// timing is off or nothing was measured).
func CollectOffloadTiming(name string) (*OffloadTimingReport, error) {
	return GetOffloadManager(name).CollectOffloadTiming()
}

// ResetOffloadTiming starts a fresh timing window on the named manager.
func ResetOffloadTiming(name string) { GetOffloadManager(name).ResetOffloadTiming() }

// UpdateOffloadTiming publishes the current pass's timing on the named manager.
func UpdateOffloadTiming(name string, replayGeneration int) bool {
	return GetOffloadManager(name).UpdateOffloadTiming(replayGeneration)
}

// UpdateState advances the named manager's phase by one step, as a forward
// pass would (for callers whose forwards bypass the module hooks).
func UpdateState(name string, replayGeneration int) error {
	return GetOffloadManager(name).UpdateState(replayGeneration)
}

// NamedModule is a module with its qualified name.
type NamedModule struct {
	Name   string
	Module nn.Module
}

// GPUMemoryUsage is the device memory a manager holds.
type GPUMemoryUsage struct {
	TransferBlockBytes int64 // the transfer slots
	ResidentBytes      int64 // resident weights: resident units and non-unit parameters
	TotalBytes         int64
	// HostMappedBytes are weights the device reads from mapped host memory
	// (gather-only embedding tables while offloading: HostMappedParams); not
	// device memory, not in TotalBytes.
	HostMappedBytes int64
}

// MB is TotalBytes in MiB.
func (u GPUMemoryUsage) MB() float64 { return float64(u.TotalBytes) / (1 << 20) }

// Option adjusts one Offload call.
type Option func(*offloadOptions)

type offloadOptions struct {
	compile CompileFunc
}

// CompileFunc compiles one unit for the device (the seed's compile_fn); it
// returns an error when it cannot (see the compiled-units issue).
type CompileFunc func(unit nn.Module) error

// WithCompile applies fn to each offloaded unit.
func WithCompile(fn CompileFunc) Option { return func(o *offloadOptions) { o.compile = fn } }

// Manager is one offload engine instance. The zero value is not usable: get
// one with GetOffloadManager.
type Manager struct {
	name      string
	mu        sync.Mutex
	cfg       Config
	cfgSet    bool
	e         *engine // nil when nothing is offloaded
	released  bool    // Release ran since the last Offload
	suspended int     // outstanding SuspendProfiling calls
	// lastMu guards last, the engine's last finished pass, apart from mu,
	// which the engine holds for a whole forward (LastPass must not wait).
	lastMu sync.Mutex
	last   PassInfo
	// pending is a profile LoadProfile loaded for the next Offload.
	pending *pendingProfile
	// failed is the current engine's failure (nil when none or no engine),
	// kept apart from mu for the same reason as last: Failed must not wait
	// for a forward pass. setEngine and engine.fail write it.
	failed atomic.Pointer[error]
}

// setEngine makes e (nil: none) the manager's engine, with its failure if it
// already has one (m.mu held).
func (m *Manager) setEngine(e *engine) {
	m.e = e
	if e != nil && e.failed != nil {
		err := e.failed
		m.failed.Store(&err)
	} else {
		m.failed.Store(nil)
	}
}

// pendingProfile is a profile waiting for Offload: the state and, when
// LoadProfile was given one, the model it was checked against.
type pendingProfile struct {
	st    *State
	dir   string
	model nn.Module
}

// Name is the manager's name.
func (m *Manager) Name() string { return m.name }

// Config returns the manager's configuration.
func (m *Manager) Config() Config {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cfg
}

// SetConfig validates and sets the configuration. It is an error while a
// model is offloaded. A disabled configuration drops outstanding profiling
// suspensions (with it they are no-ops).
func (m *Manager) SetConfig(cfg Config) error {
	c, err := cfg.validate()
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.e != nil {
		return fmt.Errorf("offload manager %q: SetConfig while a model is offloaded; Release first", m.name)
	}
	m.cfg, m.cfgSet = c, true
	if !c.Enabled {
		m.suspended = 0
	}
	return nil
}

// Phase is the current phase.
func (m *Manager) Phase() Phase {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.e == nil {
		return PhaseIdle
	}
	return m.e.phase
}

// Offload takes over model: it finds the units (the outermost modules
// matching the include patterns), packs their weights, and installs the traps
// on the model's tree. The model must have been built with its weights in
// host-addressable memory (a cpu device). Offloading a model twice
// (ErrAlreadyOffload), or a second model with one manager (ErrNameInUse),
// is an error. Before anything is staged the budget is checked against the
// least plan and the device's free memory (Config.GPUBudget: ErrBudget,
// runtime.ErrOutOfMemory), so a budget Offload accepts does not fail at the
// plan made after profiling.
//
// After LoadProfile the manager adopts the loaded profile instead (as
// OffloadFromState): no DISCOVERY or PROFILING, the model goes straight to
// INFERENCE. The profile is used once, whether adopting it succeeds or not.
func (m *Manager) Offload(model nn.Module, opts ...Option) error {
	var o offloadOptions
	for _, f := range opts {
		f(&o)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.cfgSet {
		return fmt.Errorf("offload manager %q: no configuration; call SetConfig or pass one to Offload", m.name)
	}
	if !m.cfg.Enabled {
		return nil
	}
	if err := m.inUseLocked(model); err != nil {
		return err
	}
	if p := m.pending; p != nil {
		m.pending = nil
		if p.model != nil && p.model != model {
			return fmt.Errorf("offload manager %q: the profile loaded from %s was loaded for another model; LoadProfile again with this one", m.name, p.dir)
		}
		if err := m.adoptLocked(model, p.st, nil, o, true); err != nil {
			return fmt.Errorf("adopting the profile loaded from %s: %w", p.dir, err)
		}
		return nil
	}
	tree, err := m.claim(model)
	if err != nil {
		return err
	}
	e, err := newEngine(m, model, m.cfg, o)
	if err != nil {
		unclaim(tree)
		return fmt.Errorf("offload manager %q: %w", m.name, err)
	}
	m.setEngine(e)
	m.released = false
	m.setLastPass(PassInfo{})
	return nil
}

// CheckDeviceFit repeats Offload's pre-flight check of the budget and the
// transfer blocks against the device's free memory as it is now: a caller
// that allocates device memory of its own after Offload (a KV cache) calls
// it to fail at once, not at the plan made after profiling. nil when
// nothing is offloaded or the plan is already made (INFERENCE).
func (m *Manager) CheckDeviceFit() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.e == nil || m.e.phase == PhaseInference || m.e.failed != nil {
		return nil
	}
	if err := m.e.checkDeviceFit(m.e.ownDeviceBytes()); err != nil {
		return fmt.Errorf("offload manager %q: %w", m.name, err)
	}
	return nil
}

// Failed is the error that made the manager's engine unusable (its
// forwards then return ErrEngineFailed until Release), or nil. It does not
// wait for a forward pass in progress.
func (m *Manager) Failed() error {
	if p := m.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// inUseLocked is the error of Offload(model) while m already offloads a
// model (m.mu held): the same model, or another one under the same name.
func (m *Manager) inUseLocked(model nn.Module) error {
	switch {
	case m.e == nil:
		return nil
	case m.e.model == model:
		return fmt.Errorf("offload manager %q: %w by it (Release it first)", m.name, ErrAlreadyOffload)
	}
	return fmt.Errorf("offload: manager name %q is in use by another model; give another name or Release it: %w", m.name, ErrNameInUse)
}

// claim registers model's tree as offloaded by m; a model may be offloaded
// by one manager at a time.
func (m *Manager) claim(model nn.Module) (*nn.Tree, error) {
	tree := model.Node().Tree()
	if tree == nil || tree.Root() != model {
		return nil, fmt.Errorf("offload manager %q: the model must be the root of its module tree", m.name)
	}
	registryMu.Lock()
	defer registryMu.Unlock()
	if other, ok := offloaded[tree]; ok {
		return nil, fmt.Errorf("offload manager %q: %w by manager %q", m.name, ErrAlreadyOffload, other)
	}
	offloaded[tree] = m.name
	return tree, nil
}

// unclaim forgets that tree is offloaded.
func unclaim(tree *nn.Tree) {
	registryMu.Lock()
	delete(offloaded, tree)
	registryMu.Unlock()
}

// Release tears the engine down and returns every device and pinned byte it
// took. With preserveModel the parameters are bound back to the model's own
// tensors, so the model runs as before Offload; without it the model must be
// discarded. Releasing a manager that holds no model is an error.
func (m *Manager) Release(preserveModel bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.e == nil {
		if m.released {
			return fmt.Errorf("offload manager %q: Release twice: %w", m.name, ErrNotOffloaded)
		}
		return fmt.Errorf("offload manager %q: Release: %w", m.name, ErrNotOffloaded)
	}
	err := m.e.release(preserveModel)
	unclaim(m.e.tree)
	m.setEngine(nil)
	m.released, m.pending = true, nil
	m.setLastPass(PassInfo{})
	return err
}

// GPUMemoryUsage reports the device memory the engine holds. It is an error
// before INFERENCE, when the plan has not been made.
func (m *Manager) GPUMemoryUsage() (GPUMemoryUsage, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.e == nil {
		return GPUMemoryUsage{}, fmt.Errorf("offload manager %q: GPUMemoryUsage: %w", m.name, ErrNotOffloaded)
	}
	if m.e.phase != PhaseInference {
		return GPUMemoryUsage{}, fmt.Errorf("offload manager %q: GPUMemoryUsage in %v: %w", m.name, m.e.phase, ErrNotInference)
	}
	return m.e.memoryUsage(), nil
}

// SuspendProfiling stops recording (durations and parameter reads in
// PROFILING; the profiling-iteration counter is frozen). Suspensions nest:
// recording resumes when every one has been resumed. In DISCOVERY parameter
// reads are still recorded (later phases need them). With a disabled
// configuration it does nothing (nothing is counted, so nothing leaks into
// a later enabled Offload).
func (m *Manager) SuspendProfiling() {
	m.mu.Lock()
	if !m.disabled() {
		m.suspended++
	}
	m.mu.Unlock()
}

// disabled reports a configuration with Enabled false (m.mu held).
func (m *Manager) disabled() bool { return m.cfgSet && !m.cfg.Enabled }

// ResumeProfiling undoes one SuspendProfiling; more resumes than suspends is
// an error. With a disabled configuration it does nothing.
func (m *Manager) ResumeProfiling() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.disabled() {
		return nil
	}
	if m.suspended == 0 {
		return fmt.Errorf("offload manager %q: %w", m.name, ErrUnbalanced)
	}
	m.suspended--
	return nil
}

// ExternalCompileActive reports whether the offloaded model's units were
// compiled by a compile function (WithCompile): the compiled-offload path,
// where a RequestStrategyReplan re-measures compute under the compiled
// units. It is false when no model is offloaded.
func (m *Manager) ExternalCompileActive() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.e != nil && m.e.compiled
}

// Suspensions reports the outstanding SuspendProfiling calls.
func (m *Manager) Suspensions() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.suspended
}

// PauseProfiling is the scoped form: it suspends and returns the resume
// (defer m.PauseProfiling()()). It shares the count with SuspendProfiling.
func (m *Manager) PauseProfiling() (resume func()) {
	m.SuspendProfiling()
	var once sync.Once
	return func() { once.Do(func() { _ = m.ResumeProfiling() }) }
}

// ClearProfilingDurations drops every compute-time sample (discovery's
// parameter sets are kept).
func (m *Manager) ClearProfilingDurations() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.e != nil {
		for _, u := range m.e.units {
			u.samples = nil
		}
	}
}

// OffloadUnits lists the streamed units (INFERENCE; empty before).
func (m *Manager) OffloadUnits() []NamedModule { return m.unitsWhere(false) }

// ResidentUnits lists the resident units (INFERENCE; empty before).
func (m *Manager) ResidentUnits() []NamedModule { return m.unitsWhere(true) }

func (m *Manager) unitsWhere(resident bool) []NamedModule {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []NamedModule
	if m.e == nil || m.e.phase != PhaseInference {
		return out
	}
	for _, u := range m.e.units {
		if u.resident == resident && !u.onHost {
			out = append(out, NamedModule{u.name, u.mod})
		}
	}
	return out
}

// Plan returns the plan in force (INFERENCE only).
func (m *Manager) Plan() (Plan, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.e == nil || m.e.phase != PhaseInference {
		return Plan{}, fmt.Errorf("offload manager %q: Plan: %w", m.name, ErrNotInference)
	}
	return m.e.plan, nil
}

// PlanInput returns what the planner was given (INFERENCE only): units with
// their bytes and measured compute, the H2D curve and the budget.
func (m *Manager) PlanInput() (PlanInput, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.e == nil || m.e.phase != PhaseInference {
		return PlanInput{}, fmt.Errorf("offload manager %q: PlanInput: %w", m.name, ErrNotInference)
	}
	return m.e.planIn, nil
}

// UpdateState advances the phase as one forward pass would. During a
// replan armed with manualUpdateState it counts one replay of
// replayGeneration (a generation counts once; -1 always counts) and, in
// graph timing mode, stores that replay's timing as UpdateOffloadTiming
// would.
func (m *Manager) UpdateState(replayGeneration int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.e == nil {
		return fmt.Errorf("offload manager %q: UpdateState: %w", m.name, ErrNotOffloaded)
	}
	if m.e.failed != nil { // its plan may be half built: advancing it again is unsafe
		return fmt.Errorf("offload manager %q: UpdateState: %w: %v", m.name, ErrEngineFailed, m.e.failed)
	}
	if m.e.phase == PhaseInference {
		if m.e.failed != nil {
			return fmt.Errorf("%w: %v", ErrEngineFailed, m.e.failed)
		}
		if m.e.replan.state == ReplanInProgress && m.e.replan.manual && m.e.cfg.OffloadTiming == TimingGraph {
			m.e.timing.publish(replayGeneration) // the manual measure path stores the replay's timing too
		}
		return m.e.advanceReplan(replayGeneration)
	}
	return m.e.endPass(m.suspended > 0)
}

// Footprint is what a model weighs for the engine under a configuration's
// include patterns, before discovery.
type Footprint struct {
	FixedBytes   int64   // non-unit parameters: on the device, but for HostTableBytes while offloading
	UnitBytes    []int64 // each unit's packed bytes, in traversal order
	UnitNames    []string
	MaxUnitBytes int64
	TotalBytes   int64 // FixedBytes + Σ UnitBytes
	// HostTableBytes are the bytes of FixedBytes an offloading engine keeps
	// in mapped host memory instead (gather-only embedding tables, with
	// FT_EMBED_HOST on; embedhost.go): under a budget below TotalBytes the
	// device holds FixedBytes - HostTableBytes of non-unit weights, on a
	// device that can map host memory (the CPU and CUDA devices).
	HostTableBytes int64
	// ModelUnits is true when the units are the model's own (UnitSelector,
	// no include given): an MoE model's experts, which stream through the
	// expert cache's pool beside the ring.
	ModelUnits bool
	// UnitAnnounced says of each unit whether it is below a module that
	// announces its children (nn.ChildAnnouncer: an MoE block's experts,
	// whatever the include): the engine's least plan counts a pool slot
	// for such units before any pass (leastPlan).
	UnitAnnounced []bool
}

// MinBudget is the budget that streams every unit, with slots transfer
// blocks and nothing resident: FixedBytes - HostTableBytes (an engine under
// it offloads, so its embedding table is in mapped host memory) +
// slots × MaxUnitBytes, and one pool slot more (MaxUnitBytes) for a model
// that names its own units or has a unit below an announcing block
// (UnitAnnounced): data-dependent units need a slot of their own. On a
// device that cannot map host memory the table is on the device and this is
// too small: give an engine Min(slots), which adds it back.
//
// It is not the planner's floor (leastBudget, which Offload's pre-flight
// check and MakePlan hold a budget to), and must not be: it is the budget
// of "stream everything" (a session's GPUBudget "0"), made before
// discovery and profiling, and is at least that floor for the same slots
// and units. The floor keeps units larger than the blocks resident when
// that costs less, takes the least over the block sizes, is the whole
// model when that is less, and sizes the pool slot to the largest announced
// unit and the blocks to the largest other unit; this budget sizes blocks
// and pool slot alike to the largest unit and keeps none resident, and
// counts a pool slot also for a model's own units that only announce at
// run time (ModelUnits), which the floor before a pass cannot know of.
// TestMinBudgetAtLeastFloor checks it over the fixtures.
func (f Footprint) MinBudget(slots int) int64 {
	n := f.FixedBytes - f.HostTableBytes + int64(slots)*f.MaxUnitBytes
	if f.ModelUnits || slices.Contains(f.UnitAnnounced, true) {
		n += f.MaxUnitBytes
	}
	return n
}

// Min is the budget "the minimum" with slots transfer blocks: MinBudget's
// bytes, marked Min so that the engine adds back the bytes of a table it
// could not keep in mapped host memory (a device that cannot map, or a
// failed mapping), instead of failing at its first plan.
func (f Footprint) Min(slots int) Budget {
	return Budget{Bytes: f.MinBudget(slots), Min: true}
}

// Measure computes the footprint of model under include/exclude (with no
// include, the model's own units: ModelUnits) with the engine's packing.
func Measure(model nn.Module, include, exclude []string) (Footprint, error) {
	own := false
	if len(include) == 0 {
		include, exclude = ModelUnits(model)
		own = !slices.Equal(include, DefaultInclude)
	}
	mods, err := nn.MatchOutermost(model, include, exclude)
	if err != nil {
		return Footprint{}, err
	}
	if len(mods) == 0 {
		return Footprint{}, fmt.Errorf("%w: include %q, exclude %q", ErrNothingIncluded, include, exclude)
	}
	embedOn, err := embedHostOn()
	if err != nil {
		return Footprint{}, err
	}
	f := Footprint{ModelUnits: own}
	owned := map[*nn.Parameter]bool{}
	announcers := childAnnouncers(model)
	for _, mod := range mods {
		f.UnitAnnounced = append(f.UnitAnnounced, underAnnouncer(mod, announcers))
		var n int64
		for _, p := range nn.Parameters(mod) {
			if p.Owner() == nil || !under(p.Owner(), mod) || p.Peek() == nil {
				continue
			}
			owned[p] = true
			n = alignUp(n + p.Peek().NumBytes())
		}
		f.UnitBytes = append(f.UnitBytes, n)
		f.UnitNames = append(f.UnitNames, mod.Node().Name())
		f.MaxUnitBytes = max(f.MaxUnitBytes, n)
		f.TotalBytes += n
	}
	for _, p := range nn.Parameters(model) {
		if !owned[p] && p.Peek() != nil {
			f.FixedBytes = alignUp(f.FixedBytes + p.Peek().NumBytes())
			f.HostTableBytes += hostTableBytes(model, p, embedOn)
		}
	}
	f.TotalBytes += f.FixedBytes
	return f, nil
}
