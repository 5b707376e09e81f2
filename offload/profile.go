package offload

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// SchemaVersion is the version of profile.json this build reads and writes.
const SchemaVersion = 1

// ProfileFileName is the profile's file name inside a profile directory.
const ProfileFileName = "profile.json"

// Errors of profiles.
var (
	ErrProfileMismatch = errors.New("profile does not match the model")
	ErrProfileSchema   = errors.New("profile schema version mismatch")
	ErrReadOnly        = errors.New("profiles are read-only in this configuration")
)

// TensorSig is a parameter's name, dtype and shape.
type TensorSig struct {
	Name  string `json:"name"`
	DType string `json:"dtype"`
	Shape []int  `json:"shape"`
}

// UnitState is one unit as profiled.
type UnitState struct {
	Name       string    `json:"name"`
	Params     []string  `json:"params"`
	Bytes      int64     `json:"bytes"`
	ComputeSec float64   `json:"compute_sec"`
	Samples    []float64 `json:"samples_sec,omitempty"`
}

// PlanState is the plan as saved.
type PlanState struct {
	Resident     []bool  `json:"resident"`
	Slots        int     `json:"slots"`
	SlotBytes    int64   `json:"slot_bytes"`
	SlotOf       []int   `json:"slot_of"`
	Prefetch     []int   `json:"prefetch"`
	PredictedSec float64 `json:"predicted_sec"`
	FloorSec     float64 `json:"floor_sec"`
	PeakBytes    int64   `json:"peak_bytes"`
}

// State is everything a restart needs to go straight to INFERENCE: the
// model's tensor signature, the units with their measured compute, the
// host-to-device curve, the plan, and the budget and device it was made for.
type State struct {
	SchemaVersion int         `json:"schema_version"`
	CreatedAt     time.Time   `json:"created_at"`
	Device        string      `json:"device"`
	DeviceLimit   int64       `json:"device_limit_bytes"`
	BudgetBytes   int64       `json:"budget_bytes"`
	Include       []string    `json:"include"`
	Exclude       []string    `json:"exclude,omitempty"`
	Tensors       []TensorSig `json:"tensors"`
	Fixed         []string    `json:"fixed"`
	Shared        []string    `json:"shared,omitempty"`
	FixedBytes    int64       `json:"fixed_bytes"`
	Units         []UnitState `json:"units"`
	Curve         H2DCurve    `json:"h2d_curve"`
	Plan          PlanState   `json:"plan"`
}

// State returns the manager's state (INFERENCE only).
func (m *Manager) State() (*State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.e == nil || m.e.phase != PhaseInference {
		return nil, fmt.Errorf("offload manager %q: State: %w", m.name, ErrNotInference)
	}
	return m.e.state(), nil
}

func (e *engine) state() *State {
	st := &State{SchemaVersion: SchemaVersion, CreatedAt: time.Now().UTC(), Device: e.dev.Name(),
		DeviceLimit: e.dev.Memory().Limit, BudgetBytes: e.budget, Include: e.cfg.Include, Exclude: e.cfg.Exclude,
		Tensors: signature(e.model), Curve: e.curve, FixedBytes: e.fixedBytes,
		Plan: PlanState{Resident: e.plan.Resident, Slots: e.plan.Slots, SlotBytes: e.plan.SlotBytes, SlotOf: e.plan.SlotOf,
			Prefetch: e.plan.Prefetch, PredictedSec: e.plan.PredictedSec, FloorSec: e.plan.FloorSec, PeakBytes: e.plan.PeakBytes}}
	for _, p := range e.fixed {
		st.Fixed = append(st.Fixed, p.Name())
	}
	for _, u := range e.units {
		us := UnitState{Name: u.name, Bytes: u.bytes, ComputeSec: e.planIn.Units[u.idx].ComputeSec, Samples: u.samples}
		for _, p := range u.params {
			us.Params = append(us.Params, p.Name())
			if u.shared[p] {
				st.Shared = append(st.Shared, p.Name())
			}
		}
		st.Units = append(st.Units, us)
	}
	return st
}

// signature lists every parameter of model with dtype and shape.
func signature(model nn.Module) []TensorSig {
	var out []TensorSig
	for _, p := range nn.Parameters(model) {
		t := p.Peek()
		if t == nil {
			out = append(out, TensorSig{Name: p.Name()})
			continue
		}
		out = append(out, TensorSig{Name: p.Name(), DType: t.DType().String(), Shape: slices.Clone([]int(t.Shape()))})
	}
	return out
}

// Validate checks the state against model: the same tensors (names, dtypes,
// shapes, in order) and units. The error names the first difference.
func (st *State) Validate(model nn.Module) error {
	if st.SchemaVersion != SchemaVersion {
		return fmt.Errorf("%w: profile has version %d, this build reads %d", ErrProfileSchema, st.SchemaVersion, SchemaVersion)
	}
	have := signature(model)
	byName := map[string]TensorSig{}
	for _, t := range st.Tensors {
		byName[t.Name] = t
	}
	for _, t := range have {
		p, ok := byName[t.Name]
		switch {
		case !ok:
			return fmt.Errorf("%w: tensor %s (%s %v) of the model is not in the profile", ErrProfileMismatch, t.Name, t.DType, t.Shape)
		case p.DType != t.DType:
			return fmt.Errorf("%w: tensor %s is %s in the model, %s in the profile", ErrProfileMismatch, t.Name, t.DType, p.DType)
		case !slices.Equal(p.Shape, t.Shape):
			return fmt.Errorf("%w: tensor %s has shape %v in the model, %v in the profile", ErrProfileMismatch, t.Name, t.Shape, p.Shape)
		}
		delete(byName, t.Name)
	}
	for _, t := range st.Tensors {
		if _, extra := byName[t.Name]; extra {
			return fmt.Errorf("%w: tensor %s of the profile is not in the model", ErrProfileMismatch, t.Name)
		}
	}
	n := len(st.Units)
	if len(st.Plan.Resident) != n || len(st.Plan.SlotOf) != n {
		return fmt.Errorf("%w: plan covers %d/%d units, profile has %d", ErrProfileMismatch, len(st.Plan.Resident), len(st.Plan.SlotOf), n)
	}
	streamed, largest := 0, int64(0)
	for i, r := range st.Plan.Resident {
		if r {
			continue
		}
		if st.Plan.SlotOf[i] < 0 || st.Plan.SlotOf[i] >= st.Plan.Slots {
			return fmt.Errorf("%w: unit %s is streamed through slot %d of %d", ErrProfileMismatch, st.Units[i].Name, st.Plan.SlotOf[i], st.Plan.Slots)
		}
		streamed++
		largest = max(largest, st.Units[i].Bytes)
	}
	// A plan has at most one transfer block per streamed unit, each the size
	// of the largest streamed unit (see Plan): anything else would allocate
	// what the plan never needs (two billion empty blocks, say) or copy a
	// unit into a block too small for it.
	if st.Plan.Slots < 0 || st.Plan.Slots > streamed || st.Plan.SlotBytes != largest {
		return fmt.Errorf("%w: plan has %d transfer blocks of %d bytes for %d streamed units of at most %d bytes",
			ErrProfileMismatch, st.Plan.Slots, st.Plan.SlotBytes, streamed, largest)
	}
	return nil
}

// SaveProfile writes the named manager's state to dir/profile.json (dir ""
// = the configuration's ProfileDir). The write is atomic (temporary file and
// rename).
func SaveProfile(dir, name string) error { return GetOffloadManager(name).SaveProfile(dir) }

// SaveProfile writes the manager's state (see the package function).
func (m *Manager) SaveProfile(dir string) error {
	cfg := m.Config()
	if cfg.ProfileReadOnly {
		return fmt.Errorf("offload manager %q: SaveProfile: %w", m.name, ErrReadOnly)
	}
	if dir == "" {
		dir = cfg.ProfileDir
	}
	if dir == "" {
		return fmt.Errorf("offload manager %q: SaveProfile: no directory given and Config.ProfileDir is empty", m.name)
	}
	st, err := m.State()
	if err != nil {
		return err
	}
	data, err := json.MarshalIndent(st, "", " ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("offload manager %q: SaveProfile: %w", m.name, err)
	}
	tmp, err := os.CreateTemp(dir, ".profile-*.json")
	if err != nil {
		return fmt.Errorf("offload manager %q: SaveProfile: %w", m.name, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("offload manager %q: SaveProfile: %w", m.name, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("offload manager %q: SaveProfile: %w", m.name, err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, ProfileFileName)); err != nil {
		return fmt.Errorf("offload manager %q: SaveProfile: %w", m.name, err)
	}
	return nil
}

// LoadProfile reads dir/profile.json and checks its schema version. It does
// not touch any manager or model; OffloadFromState adopts the result.
func LoadProfile(dir string) (*State, error) {
	path := filepath.Join(dir, ProfileFileName)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("profile %s: %w", path, err)
	}
	var head struct {
		SchemaVersion *int `json:"schema_version"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, fmt.Errorf("profile %s: corrupt: %w", path, err)
	}
	if head.SchemaVersion == nil {
		return nil, fmt.Errorf("profile %s: corrupt: no schema_version", path)
	}
	if *head.SchemaVersion != SchemaVersion {
		return nil, fmt.Errorf("profile %s: %w: file has version %d, this build reads %d", path, ErrProfileSchema, *head.SchemaVersion, SchemaVersion)
	}
	var st State
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("profile %s: corrupt: %w", path, err)
	}
	if len(st.Units) == 0 || len(st.Tensors) == 0 {
		return nil, fmt.Errorf("profile %s: corrupt: no units or tensors", path)
	}
	if err := st.Curve.validate(); err != nil {
		return nil, fmt.Errorf("profile %s: corrupt H2D curve: %w", path, err)
	}
	return &st, nil
}

// OffloadFromProfile loads dir's profile and offloads model straight into
// INFERENCE with it (no discovery or profiling). cfg, when non-nil, replaces
// the manager's configuration. See OffloadFromState for what a failure
// leaves behind.
func OffloadFromProfile(model nn.Module, dir string, cfg *Config, name string, opts ...Option) error {
	st, err := LoadProfile(dir)
	if err != nil {
		return err
	}
	return OffloadFromState(model, st, cfg, name, true, opts...)
}

// OffloadFromState adopts st for model and enters INFERENCE: the units and
// plan are the state's; the model's weights are packed (streamed units) and
// uploaded (resident ones) as the plan says. allowStrategyReplan keeps what a
// later RequestStrategyReplan needs (the compiled-units issue).
//
// On failure every device and host byte the engine took is returned and the
// model's parameters are bound to their original tensors again, so the model
// is as before the call; the manager holds no model.
func OffloadFromState(model nn.Module, st *State, cfg *Config, name string, allowStrategyReplan bool, opts ...Option) error {
	return adopt(model, st, cfg, name, nil, opts)
}

// LoadModelFromProfile places the weights of a model built on the meta
// device (shapes and dtypes only) directly from src: resident units and
// non-unit parameters are read into device memory through small staging
// buffers, streamed units straight into their pinned blocks. No full copy of
// the model exists in host memory at any point. The model must match the
// profile. On failure nothing stays allocated; the model keeps its meta
// tensors.
func LoadModelFromProfile(model nn.Module, src WeightSource, st *State, cfg *Config, name string, opts ...Option) error {
	if src == nil {
		return errors.New("LoadModelFromProfile: no weight source")
	}
	return adopt(model, st, cfg, name, src, opts)
}

func adopt(model nn.Module, st *State, cfg *Config, name string, src WeightSource, opts []Option) error {
	m := GetOffloadManager(name)
	// A profile made with a stream dtype names the converted tensors: the
	// model matches it once the engine has converted it.
	validateAfter := false
	if err := st.Validate(model); err != nil {
		m.mu.Lock()
		sd := m.cfg.StreamDType
		m.mu.Unlock()
		if cfg != nil {
			sd = cfg.StreamDType
		}
		if sd == runtime.Invalid {
			return err
		}
		validateAfter = true
	}
	if cfg != nil {
		m.mu.Lock()
		busy := m.e != nil
		m.mu.Unlock()
		if !busy {
			c := *cfg
			c.Include, c.Exclude = st.Include, st.Exclude
			if err := m.SetConfig(c); err != nil {
				return err
			}
		}
	}
	var o offloadOptions
	for _, f := range opts {
		f(&o)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.cfgSet || !m.cfg.Enabled || m.cfg.Device == nil {
		return fmt.Errorf("offload manager %q: no enabled configuration with a device", m.name)
	}
	if m.e != nil {
		return fmt.Errorf("offload manager %q: %w (Release it first)", m.name, ErrAlreadyOffload)
	}
	tree, err := m.claim(model)
	if err != nil {
		return err
	}
	e, err := buildEngine(m, model, m.cfg, src)
	if err == nil && validateAfter {
		if err = st.Validate(model); err != nil {
			e.unquantize()
			e.closeStream()
		}
	}
	if err == nil && o.compile != nil {
		if err = applyCompile(e.units, o.compile); err != nil {
			e.unquantize()
			e.closeStream()
		}
	}
	if err == nil {
		if err = e.startFromState(st); err != nil {
			e.restore()
			e.freeAll()
			e.closeStream()
		}
	}
	if err != nil {
		unclaim(tree)
		return fmt.Errorf("offload manager %q: %w", m.name, err)
	}
	m.e, m.released = e, false
	return nil
}

// restore binds every parameter back to its original tensor.
func (e *engine) restore() {
	for _, u := range e.units {
		for i, p := range u.params {
			_ = p.Bind(u.orig[i])
		}
	}
	for i, p := range e.fixed {
		_ = p.Bind(e.fixedOrig[i])
	}
}

// startFromState places the weights as st's plan says and enters INFERENCE.
func (e *engine) startFromState(st *State) error {
	if len(st.Units) != len(e.units) {
		return fmt.Errorf("%w: profile has %d units, the model %d under include %q", ErrProfileMismatch, len(st.Units), len(e.units), e.cfg.Include)
	}
	for i, u := range e.units {
		su := st.Units[i]
		names := make([]string, len(u.params))
		for j, p := range u.params {
			names[j] = p.Name()
		}
		if su.Name != u.name || su.Bytes != u.bytes {
			return fmt.Errorf("%w: unit %d is %s (%d bytes) in the profile, %s (%d bytes) in the model", ErrProfileMismatch, i, su.Name, su.Bytes, u.name, u.bytes)
		}
		if !slices.Equal(su.Params, names) {
			return fmt.Errorf("%w: unit %s has parameters %q in the profile, %q in the model", ErrProfileMismatch, u.name, su.Params, names)
		}
	}
	mem := e.dev.Memory()
	if mem.Limit > 0 {
		free := mem.Limit - mem.InUse
		if st.Plan.PeakBytes > free {
			return fmt.Errorf("the profile's plan needs %s of %s but only %s is free (%s limit); make a new profile for this budget",
				runtime.FormatBytes(st.Plan.PeakBytes), e.dev.Name(), runtime.FormatBytes(free), runtime.FormatBytes(mem.Limit))
		}
	}
	e.weightTotal()
	// The streamed units' pinned blocks are allocated and filled on other
	// goroutines while the resident weights are uploaded here: page locking
	// and reading are slow in different places and overlap well.
	var streamed []*unit
	for i, u := range e.units {
		if !st.Plan.Resident[i] {
			streamed = append(streamed, u)
		}
	}
	packed := make(chan error, 1)
	go func() { packed <- e.st.packAll(streamed) }()
	err := e.placeFromState(st)
	e.st.freeStaging()
	if perr := <-packed; err == nil {
		err = perr
	}
	if err != nil {
		return err
	}
	t := time.Now()
	if err := e.allocSlots(); err != nil {
		return err
	}
	e.trace("transfer blocks", time.Since(t))
	e.unhook = e.tree.AddHook(e)
	return nil
}

// placeFromState uploads the non-unit, shared and resident weights and
// adopts the state's curve and plan.
func (e *engine) placeFromState(st *State) error {
	t := time.Now()
	if err := e.uploadFixed(); err != nil {
		return err
	}
	e.trace("non-unit parameters to the device", time.Since(t))
	shared := map[string]bool{}
	for _, n := range st.Shared {
		shared[n] = true
	}
	for _, u := range e.units {
		var ps []*nn.Parameter
		var origs []*runtime.Tensor
		for i, p := range u.params {
			if shared[p.Name()] {
				u.shared[p] = true
				ps, origs = append(ps, p), append(origs, u.orig[i])
			}
		}
		if err := e.uploadParams(ps, origs, "offload shared parameters of "+u.name); err != nil {
			return err
		}
	}
	e.curve = st.Curve
	e.budget = st.BudgetBytes
	e.plan = Plan{Resident: st.Plan.Resident, Slots: st.Plan.Slots, SlotBytes: st.Plan.SlotBytes, SlotOf: st.Plan.SlotOf,
		Prefetch: st.Plan.Prefetch, PredictedSec: st.Plan.PredictedSec, FloorSec: st.Plan.FloorSec, PeakBytes: st.Plan.PeakBytes}
	// A later replan plans with this configuration's slot request (0 = the
	// planner chooses), not necessarily the profile's count.
	e.planIn = PlanInput{FixedBytes: st.FixedBytes, Budget: st.BudgetBytes, Slots: e.cfg.TransferBlocks, Curve: st.Curve, TransferScale: e.cfg.TransferBudgetScale}
	for i, u := range e.units {
		su := st.Units[i]
		e.planIn.Units = append(e.planIn.Units, PlanUnit{Name: su.Name, Bytes: su.Bytes, ComputeSec: su.ComputeSec})
		u.samples = slices.Clone(su.Samples)
	}
	t = time.Now()
	err := e.placeResidentFrom(st.Plan.Resident)
	e.trace("resident units to the device", time.Since(t))
	return err
}

// placeResidentFrom uploads the units marked resident straight from their
// weight source into device buffers of their own.
func (e *engine) placeResidentFrom(resident []bool) error {
	for i, u := range e.units {
		if !resident[i] {
			continue
		}
		buf, err := e.dev.Alloc(max(u.bytes, 1), "offload resident unit "+u.name)
		if err != nil {
			return err
		}
		u.dev = buf
		if err := e.st.fill(e.copy, buf, u.params, u.orig, u.offs); err != nil {
			return err
		}
		if err := e.bindTo(u, buf); err != nil {
			return err
		}
	}
	return nil
}
