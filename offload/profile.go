package offload

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/place"
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
	// Announced marks a data-dependent unit (pool.go); CallsPerPass is its
	// profiled frequency and Calls its calls in each profiled pass.
	Announced    bool      `json:"announced,omitempty"`
	CallsPerPass float64   `json:"calls_per_pass,omitempty"`
	Calls        []float64 `json:"calls,omitempty"`
	// CopyBytes is what the plan timed a copy of the unit by when it
	// travels packed (PlanUnit.CopyBytes; State.StreamCodec "exp4"), 0
	// when it travels as it is.
	CopyBytes int64 `json:"copy_bytes,omitempty"`
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
	// The announced units' pool (planner_pool.go).
	PoolSlots         int     `json:"pool_slots,omitempty"`
	PoolSlotBytes     int64   `json:"pool_slot_bytes,omitempty"`
	ExpectedMissRate  float64 `json:"expected_miss_rate,omitempty"`
	ExpectedPoolBytes float64 `json:"expected_pool_bytes,omitempty"`
	// Host[u] is true for a unit the plan computes on the host CPU (absent
	// for a two-way plan); loading such a profile needs Config.HostBackend.
	Host []bool `json:"host,omitempty"`
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
	// MaxAnnounced is the most units one announcement named (PlanInput's).
	MaxAnnounced int `json:"max_announced,omitempty"`
	// BudgetMin is true when BudgetBytes is a Min budget (Budget.Min): a
	// load that puts a table the profile kept in mapped host memory on the
	// device grows the budget by its bytes, as the Min budget does when
	// offloading. Profiles without it load as before (false).
	BudgetMin bool `json:"budget_min,omitempty"`
	// StreamCodec is how the plan's streamed units travel: "exp4"
	// (Config.StreamExp4: packed, each transfer block holding both forms)
	// or "" (as they are). A profile loads only under a configuration
	// with the same codec.
	StreamCodec string `json:"stream_codec,omitempty"`
}

// StreamCodecExp4 is State.StreamCodec for Config.StreamExp4.
const StreamCodecExp4 = "exp4"

// codecName is a StreamCodec as messages say it ("none" for "").
func codecName(c string) string {
	if c == "" {
		return "none"
	}
	return c
}

// configCodec is the StreamCodec a configuration streams with.
func configCodec(c *Config) string {
	if c.StreamExp4 {
		return StreamCodecExp4
	}
	return ""
}

// State returns the manager's state (INFERENCE only).
func (m *Manager) State() (*State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.e == nil {
		return nil, fmt.Errorf("offload manager %q: State: %w (it offloads no model)", m.name, ErrNotOffloaded)
	}
	if m.e.phase != PhaseInference {
		return nil, fmt.Errorf("offload manager %q: State: %w", m.name, ErrNotInference)
	}
	return m.e.state(), nil
}

func (e *engine) state() *State {
	st := &State{SchemaVersion: SchemaVersion, CreatedAt: time.Now().UTC(), Device: e.dev.Name(),
		DeviceLimit: e.dev.Memory().Limit, BudgetBytes: e.budget, BudgetMin: e.budgetMin, Include: e.cfg.Include, Exclude: e.cfg.Exclude,
		Tensors: signature(e.model), Curve: e.curve, FixedBytes: e.fixedBytes,
		Plan: planState(e.plan), MaxAnnounced: e.planIn.MaxAnnounced, StreamCodec: configCodec(&e.cfg)}
	for _, p := range e.fixed {
		st.Fixed = append(st.Fixed, p.Name())
	}
	for _, u := range e.units {
		us := UnitState{Name: u.name, Bytes: u.bytes, ComputeSec: e.planIn.Units[u.idx].ComputeSec, Samples: u.samples,
			CopyBytes: e.planIn.Units[u.idx].CopyBytes}
		if u.announced {
			us.Announced, us.CallsPerPass, us.Calls = true, e.planIn.Units[u.idx].Calls, u.calls
		}
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
	if h := st.Plan.Host; len(h) != 0 && len(h) != n {
		return fmt.Errorf("%w: plan places %d units on the host or not, profile has %d", ErrProfileMismatch, len(h), n)
	}
	if st.StreamCodec != "" && st.StreamCodec != StreamCodecExp4 {
		return fmt.Errorf("%w: stream codec %q (this build streams with none or %q)", ErrProfileMismatch, st.StreamCodec, StreamCodecExp4)
	}
	for _, u := range st.Units {
		switch {
		case u.CopyBytes != 0 && st.StreamCodec == "":
			return fmt.Errorf("%w: unit %s has packed copies of %d bytes but the profile has no stream codec", ErrProfileMismatch, u.Name, u.CopyBytes)
		case u.CopyBytes < 0 || u.CopyBytes != 0 && u.CopyBytes >= u.Bytes:
			return fmt.Errorf("%w: unit %s of %d bytes has packed copies of %d bytes", ErrProfileMismatch, u.Name, u.Bytes, u.CopyBytes)
		}
	}
	streamed, largest := 0, int64(0)
	pooled, poolLargest := 0, int64(0)
	for i, r := range st.Plan.Resident {
		if len(st.Plan.Host) > 0 && st.Plan.Host[i] {
			switch {
			case r:
				return fmt.Errorf("%w: unit %s is both resident and computed on the host", ErrProfileMismatch, st.Units[i].Name)
			case st.Units[i].Announced:
				return fmt.Errorf("%w: announced unit %s is computed on the host; data-dependent units cannot be", ErrProfileMismatch, st.Units[i].Name)
			case st.Plan.SlotOf[i] != -1:
				return fmt.Errorf("%w: host unit %s is placed in transfer block %d", ErrProfileMismatch, st.Units[i].Name, st.Plan.SlotOf[i])
			}
			continue
		}
		if r {
			continue
		}
		if st.Units[i].Announced {
			if st.Plan.SlotOf[i] != -1 {
				return fmt.Errorf("%w: announced unit %s is placed in transfer block %d; it belongs to the pool", ErrProfileMismatch, st.Units[i].Name, st.Plan.SlotOf[i])
			}
			pooled++
			poolLargest = max(poolLargest, st.Units[i].Bytes)
			continue
		}
		if st.Plan.SlotOf[i] < 0 || st.Plan.SlotOf[i] >= st.Plan.Slots {
			return fmt.Errorf("%w: unit %s is streamed through slot %d of %d", ErrProfileMismatch, st.Units[i].Name, st.Plan.SlotOf[i], st.Plan.Slots)
		}
		streamed++
		largest = max(largest, st.Units[i].Bytes+st.Units[i].CopyBytes)
	}
	// A plan has at most one transfer block per streamed unit, each the size
	// of the largest streamed unit with its packed copy (see Plan): anything
	// else would allocate what the plan never needs (two billion empty
	// blocks, say) or copy a unit into a block too small for it.
	if st.Plan.Slots < 0 || st.Plan.Slots > streamed || st.Plan.SlotBytes != largest {
		return fmt.Errorf("%w: plan has %d transfer blocks of %d bytes for %d streamed units of at most %d bytes",
			ErrProfileMismatch, st.Plan.Slots, st.Plan.SlotBytes, streamed, largest)
	}
	if pooled == 0 && (st.Plan.PoolSlots != 0 || st.Plan.PoolSlotBytes != 0) ||
		pooled > 0 && (st.Plan.PoolSlots < 1 || st.Plan.PoolSlots > pooled || st.Plan.PoolSlotBytes != poolLargest) {
		return fmt.Errorf("%w: plan has %d pool slots of %d bytes for %d streamed announced units of at most %d bytes",
			ErrProfileMismatch, st.Plan.PoolSlots, st.Plan.PoolSlotBytes, pooled, poolLargest)
	}
	return nil
}

// SaveProfile writes the named manager's state to dir/profile.json (dir ""
// = the configuration's ProfileDir). The write is atomic (temporary file and
// rename). A manager that offloads no model has no state to save: an error
// wrapping ErrNotOffloaded (with name "", the default manager's, saying that
// no name was given: a session that is not offloaded has Manager "").
func SaveProfile(dir, name string) error {
	m := GetOffloadManager(name)
	if name == "" && m.Phase() == PhaseIdle { // PhaseIdle: it holds no model
		return fmt.Errorf("offload: SaveProfile: no manager name given, and the default manager %q offloads no model (a session that is not offloaded has no manager: its Manager is \"\" without GPUBudget or ProfileDir): %w",
			DefaultManagerName, ErrNotOffloaded)
	}
	return m.SaveProfile(dir)
}

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

// ReadProfile reads dir/profile.json and checks its schema version. It does
// not touch any manager or model; OffloadFromState adopts the result, and
// LoadProfile loads it into a manager.
func ReadProfile(dir string) (*State, error) {
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

// LoadProfile loads the profile in dir into the named manager (dir "" =
// the configuration's ProfileDir) so that the manager's next Offload skips
// DISCOVERY and PROFILING and adopts it, going straight to INFERENCE.
// model, when given, is checked against the profile now, and the next
// Offload must be of that model. When the manager already holds a model
// (model nil or that model), the profile is adopted for it at once: the
// engine is rebuilt with the profile's plan (see OffloadFromState for what a
// failure then leaves: the model restored, the manager holding none).
func LoadProfile(dir string, model nn.Module, name string) error {
	return GetOffloadManager(name).LoadProfile(dir, model)
}

// LoadProfile loads a profile into the manager (see the package function).
func (m *Manager) LoadProfile(dir string, model nn.Module) error {
	if dir == "" {
		dir = m.Config().ProfileDir
	}
	if dir == "" {
		return fmt.Errorf("offload manager %q: LoadProfile: no directory given and Config.ProfileDir is empty", m.name)
	}
	st, err := ReadProfile(dir)
	if err != nil {
		return fmt.Errorf("offload manager %q: LoadProfile: %w", m.name, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.e; e != nil {
		if model != nil && model != e.model {
			return fmt.Errorf("offload manager %q: LoadProfile for another model than the one it holds; Release it first", m.name)
		}
		if err := st.Validate(e.model); err != nil {
			return fmt.Errorf("offload manager %q: LoadProfile %s: %w", m.name, dir, err)
		}
		target, src, o := e.model, e.src, e.opts
		err := e.release(true)
		unclaim(e.tree)
		m.setEngine(nil)
		m.setLastPass(PassInfo{})
		if err != nil {
			return fmt.Errorf("offload manager %q: LoadProfile: releasing the running engine: %w", m.name, err)
		}
		if err := m.adoptLocked(target, st, src, o, true); err != nil {
			return fmt.Errorf("offload manager %q: LoadProfile %s: %w", m.name, dir, err)
		}
		return nil
	}
	if model != nil {
		if err := st.Validate(model); err != nil {
			return fmt.Errorf("offload manager %q: LoadProfile %s: %w", m.name, dir, err)
		}
	}
	m.pending = &pendingProfile{st: st, dir: dir, model: model}
	return nil
}

// OffloadFromProfile loads dir's profile and offloads model straight into
// INFERENCE with it (no discovery or profiling): Init with cfg (when
// non-nil), LoadProfile and Offload in one call. See OffloadFromState for
// what a failure leaves behind.
func OffloadFromProfile(model nn.Module, dir string, cfg *Config, name string, opts ...Option) error {
	st, err := ReadProfile(dir)
	if err != nil {
		return err
	}
	return OffloadFromState(model, st, cfg, name, true, opts...)
}

// OffloadFromState adopts st for model and enters INFERENCE: the units and
// plan are the state's; the model's weights are packed (streamed units) and
// uploaded (resident ones) as the plan says. With allowStrategyReplan false
// the manager refuses RequestStrategyReplan (its status's CanRequest is
// false): the caller promises not to ask for one.
//
// On failure every device and host byte the engine took is returned and the
// model's parameters are bound to their original tensors again, so the model
// is as before the call; the manager holds no model.
func OffloadFromState(model nn.Module, st *State, cfg *Config, name string, allowStrategyReplan bool, opts ...Option) error {
	return adopt(model, st, cfg, name, nil, opts, allowStrategyReplan)
}

// LoadOptions are LoadModelFromProfile's choices beyond the model, source
// and profile (the seed's strict, buffer_device and diagnose).
type LoadOptions struct {
	// Strict makes a tensor the profile names and the source lacks an error
	// listing every such tensor. Without it those tensors are filled with
	// zeros of the profile's dtype and shape, and LoadReport.Missing lists
	// them.
	Strict bool
	// BufferDevice is where the model's non-parameter tensors go: a model
	// that implements BufferPlacer is told to put them there. nil means the
	// configuration's Device.
	BufferDevice runtime.Device
	// Diagnose fills LoadReport.Units and LoadReport.Problems: how the
	// engine tracks each unit's (nested) parameters and anything it does
	// not track.
	Diagnose bool
}

// BufferPlacer is a model with non-parameter tensors of its own (tables,
// masks: the seed's module buffers) that LoadModelFromProfile places with
// the weights. Models that allocate such tensors per forward on their
// backend's device (the decoder's activations and KV caches) need not
// implement it.
type BufferPlacer interface {
	// PlaceBuffers puts the model's non-parameter tensors on dev.
	PlaceBuffers(dev runtime.Device) error
}

// LoadReport is what LoadModelFromProfile did.
type LoadReport struct {
	// Missing lists the tensors the source lacked and that were filled
	// with zeros (LoadOptions.Strict false), sorted.
	Missing []string
	// BufferDevice names the device the model's buffers were placed on ("" when
	// the model is not a BufferPlacer).
	BufferDevice string
	// Units and Problems are filled with LoadOptions.Diagnose.
	Units    []UnitDiagnosis
	Problems []string
}

// UnitDiagnosis is how the engine tracks one unit's parameters.
type UnitDiagnosis struct {
	Name     string
	Resident bool
	Modules  int   // modules in the unit's subtree, the unit included
	Params   int   // parameters the unit owns (its subtree's)
	Nested   int   // of those, owned by a module below the unit
	Shared   int   // of those, resident because another unit reads them
	Bytes    int64 // the unit's packed bytes
}

// String renders the report for a log.
func (r *LoadReport) String() string {
	if r == nil {
		return "no load report"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "loaded: %d tensors filled with zeros", len(r.Missing))
	if len(r.Missing) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(r.Missing, ", "))
	}
	if r.BufferDevice != "" {
		fmt.Fprintf(&b, "; buffers on %s", r.BufferDevice)
	}
	b.WriteString("\n")
	for _, u := range r.Units {
		fmt.Fprintf(&b, "unit %s: %s, %d modules, %d parameters (%d nested, %d shared), %s\n", u.Name,
			placeName(!u.Resident), u.Modules, u.Params, u.Nested, u.Shared, runtime.FormatBytes(u.Bytes))
	}
	for _, p := range r.Problems {
		fmt.Fprintf(&b, "problem: %s\n", p)
	}
	return b.String()
}

// LoadModelFromProfile places the weights of a model built on the meta
// device (shapes and dtypes only) directly from src: resident units and
// non-unit parameters are read into device memory through small staging
// buffers, streamed units straight into their pinned blocks. No full copy of
// the model exists in host memory at any point. The model must match the
// profile; lo says what to do about tensors src lacks, where the model's
// buffers go and whether to diagnose. On failure nothing stays allocated;
// the model keeps its meta tensors.
func LoadModelFromProfile(model nn.Module, src WeightSource, st *State, cfg *Config, name string, lo LoadOptions, opts ...Option) (*LoadReport, error) {
	if src == nil {
		return nil, errors.New("LoadModelFromProfile: no weight source")
	}
	if st == nil {
		return nil, errors.New("LoadModelFromProfile: no profile state")
	}
	filled, missing := FillMissing(src, st)
	if len(missing) > 0 && lo.Strict {
		return nil, fmt.Errorf("LoadModelFromProfile: %w", MissingTensorsError(place.Describe(src), missing))
	}
	if err := adopt(model, st, cfg, name, filled, opts, true); err != nil {
		return nil, err
	}
	rep := &LoadReport{Missing: missing}
	m := GetOffloadManager(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.e == nil || m.e.model != model {
		return nil, fmt.Errorf("offload manager %q: LoadModelFromProfile: the model was released while it was being loaded", m.name)
	}
	if bp, ok := model.(BufferPlacer); ok {
		dev := lo.BufferDevice
		if dev == nil {
			dev = m.e.dev
		}
		if err := bp.PlaceBuffers(dev); err != nil {
			err = errors.Join(fmt.Errorf("LoadModelFromProfile: placing the model's buffers on %s: %w", dev.Name(), err), m.e.release(true))
			unclaim(m.e.tree)
			m.setEngine(nil)
			m.released = true
			return nil, err
		}
		rep.BufferDevice = dev.Name()
	}
	if lo.Diagnose {
		rep.Units, rep.Problems = m.e.diagnose()
	}
	return rep, nil
}

// missingShown is how many missing tensors MissingTensorsError names.
const missingShown = 5

// MissingTensorsError is the strict error for the tensors of a profile that
// a checkpoint (described by where) lacks, missing sorted: it wraps
// ErrProfileMismatch and gives their count and the first five names, then
// how many more there are (a checkpoint of another model lacks tens of
// them). Nil when nothing is missing.
func MissingTensorsError(where string, missing []string) error {
	if len(missing) == 0 {
		return nil
	}
	list := strings.Join(missing[:min(len(missing), missingShown)], ", ")
	if n := len(missing) - missingShown; n > 0 {
		list += fmt.Sprintf(" … and %d more", n)
	}
	return fmt.Errorf("%w: %s lacks %d tensors of the profile (strict mode): %s", ErrProfileMismatch, where, len(missing), list)
}

// FillMissing wraps src so that the tensors st names and src lacks read as
// zeros of the profile's dtype and shape; it returns the wrapped source (src
// itself when nothing is missing) and the names it fills, sorted.
func FillMissing(src WeightSource, st *State) (WeightSource, []string) {
	var missing []string
	sigs := map[string]TensorSig{}
	for _, t := range st.Tensors {
		if _, err := src.Info(t.Name); err != nil {
			missing = append(missing, t.Name)
			sigs[t.Name] = t
		}
	}
	if len(missing) == 0 {
		return src, nil
	}
	sort.Strings(missing)
	return zeroFilled{src, sigs}, missing
}

// zeroFilled is a source whose missing tensors read as zeros.
type zeroFilled struct {
	WeightSource
	zero map[string]TensorSig
}

func (z zeroFilled) Info(name string) (loader.TensorInfo, error) {
	sig, ok := z.zero[name]
	if !ok {
		return z.WeightSource.Info(name)
	}
	dt, err := runtime.ParseDType(sig.DType)
	if err != nil {
		return loader.TensorInfo{}, fmt.Errorf("profile tensor %s: %w", name, err)
	}
	shape := runtime.Shape(slices.Clone(sig.Shape))
	return loader.TensorInfo{Name: name, DType: dt, Shape: shape, Size: int64(shape.NumElements()) * int64(dt.Size())}, nil
}

func (z zeroFilled) ReadAt(name string, dst []byte, off int64) error {
	if _, ok := z.zero[name]; !ok {
		return z.WeightSource.ReadAt(name, dst, off)
	}
	clear(dst)
	return nil
}

// Dir keeps the wrapped source's location for error messages.
func (z zeroFilled) Dir() string {
	if l, ok := z.WeightSource.(place.Located); ok {
		return l.Dir()
	}
	return "(weight source)"
}

// diagnose reports how each unit's parameters are tracked and any
// parameter of the model that no unit and no resident set tracks, or that a
// resident unit or the resident set leaves off the compute device.
func (e *engine) diagnose() ([]UnitDiagnosis, []string) {
	var units []UnitDiagnosis
	var problems []string
	for _, u := range e.units {
		d := UnitDiagnosis{Name: u.name, Resident: u.resident, Modules: len(nn.Modules(u.mod)), Params: len(u.params), Bytes: u.bytes}
		for _, p := range u.params {
			if p.Owner() != u.mod {
				d.Nested++
			}
			if u.shared[p] {
				d.Shared++
			}
			if (u.resident || u.shared[p]) && p.Peek() != nil && p.Peek().Device() != e.dev {
				problems = append(problems, fmt.Sprintf("parameter %s of resident unit %s is on %s, not %s", p.Name(), u.name, p.Peek().Device().Name(), e.dev.Name()))
			}
		}
		units = append(units, d)
	}
	fixed := map[*nn.Parameter]bool{}
	for _, p := range e.fixed {
		fixed[p] = true
		if p.Peek() != nil && p.Peek().Device() != e.dev {
			problems = append(problems, fmt.Sprintf("resident parameter %s is on %s, not %s", p.Name(), p.Peek().Device().Name(), e.dev.Name()))
		}
	}
	for _, p := range nn.Parameters(e.model) {
		if e.owner[p] == nil && !fixed[p] {
			problems = append(problems, fmt.Sprintf("parameter %s is tracked by no unit and is not resident", p.Name()))
		}
	}
	return units, problems
}

func adopt(model nn.Module, st *State, cfg *Config, name string, src WeightSource, opts []Option, allowReplan bool) error {
	if st == nil {
		return errors.New("offload: no profile state")
	}
	m := GetOffloadManager(name)
	// A profile made with a stream dtype names the converted tensors: the
	// model matches it once the engine has converted it (adoptLocked).
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
	}
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
	var o offloadOptions
	for _, f := range opts {
		f(&o)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.inUseLocked(model); err != nil {
		return err
	}
	m.pending = nil
	return m.adoptLocked(model, st, src, o, allowReplan)
}

// adoptLocked builds an engine for model from st (weights from src, or the
// model's host tensors when src is nil) and enters INFERENCE. The
// configuration's include and exclude patterns become the profile's. m.mu
// is held and the manager holds no model.
func (m *Manager) adoptLocked(model nn.Module, st *State, src WeightSource, o offloadOptions, allowReplan bool) error {
	if !m.cfgSet || !m.cfg.Enabled || m.cfg.Device == nil {
		return fmt.Errorf("offload manager %q: no enabled configuration with a device", m.name)
	}
	validateAfter := false
	if err := st.Validate(model); err != nil {
		if m.cfg.StreamDType == runtime.Invalid {
			return err
		}
		validateAfter = true // the names of the converted tensors: checked once converted
	}
	m.cfg.Include, m.cfg.Exclude = st.Include, st.Exclude
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
		e.opts, e.compiled, e.noReplan = o, o.compile != nil, !allowReplan
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
	m.setEngine(e)
	m.released = false
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
	if got, want := st.StreamCodec, configCodec(&e.cfg); got != want {
		return fmt.Errorf("%w: the profile was made with stream codec %s, this configuration streams with stream codec %s "+
			"(Config.StreamExp4; infer: --stream-codec): use the profile's codec or make a new profile", ErrProfileMismatch, codecName(got), codecName(want))
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
	free := mem.Limit - mem.InUse
	if mem.Limit > 0 {
		if st.Plan.PeakBytes > free {
			return fmt.Errorf("the profile's plan needs %s of %s but only %s is free (%s limit); make a new profile for this budget",
				runtime.FormatBytes(st.Plan.PeakBytes), e.dev.Name(), runtime.FormatBytes(free), runtime.FormatBytes(mem.Limit))
		}
	}
	if e.cfg.HostBackend == nil {
		for i, h := range st.Plan.Host {
			if h {
				return fmt.Errorf("the profile's plan computes %d units on the host (%s first) but no host backend is configured (Config.HostBackend; infer: --host-threads N)",
					countTrue(st.Plan.Host), e.units[i].name)
			}
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
	if err == nil {
		err = e.placeHostTables()
	}
	if err == nil {
		avail := int64(-1) // no device limit
		if mem.Limit > 0 {
			avail = free
		}
		err = e.checkFixedFromState(st, avail)
	}
	if err != nil {
		return err
	}
	if err := e.rateBlocks(streamed); err != nil {
		return err
	}
	// Later replans (tokens per forward changing) plan three ways too: the
	// host times come from the host backend measured now, over the packed
	// host blocks.
	if err := e.hostInputs(&e.planIn, true); err != nil {
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

// checkFixedFromState compares the non-unit bytes placed on the device with
// the profile's: an embedding table the profile kept in mapped host memory
// may be on the device now (FT_EMBED_HOST=0, a device that cannot map host
// memory, a failed mapping). Grown fixed bytes raise the plan's peak: past
// the profile's budget or the device's free memory (free, -1 = no limit)
// they fail with ErrProfileMismatch naming the tables; within them the plan
// keeps its placement with the real fixed bytes, and later replans plan
// with them. A profile made under a Min budget (State.BudgetMin) grows its
// budget by the bytes of the tables Footprint counted as in mapped host
// memory that are on the device now (as a Min budget does when
// offloading), so only the device's free memory can then refuse them.
func (e *engine) checkFixedFromState(st *State, free int64) error {
	peak := st.Plan.PeakBytes - st.FixedBytes + e.fixedBytes
	budget := st.BudgetBytes
	if e.fixedBytes > st.FixedBytes {
		if st.BudgetMin && budget > 0 {
			budget += min(e.unmappedBytes(), e.fixedBytes-st.FixedBytes)
		}
		over := ""
		switch {
		case budget > 0 && peak > budget:
			over = "the profile's budget of " + runtime.FormatBytes(budget)
		case free >= 0 && peak > free:
			over = "the " + runtime.FormatBytes(free) + " free on " + e.dev.Name()
		}
		if over != "" {
			var tabs []string
			for _, t := range e.devTables {
				tabs = append(tabs, fmt.Sprintf("%s (%s: %s)", t.name, runtime.FormatBytes(t.bytes), t.why))
			}
			what := "no embedding table is on the device"
			if len(tabs) > 0 {
				what = "on the device now: " + strings.Join(tabs, ", ")
			}
			return fmt.Errorf("%w: the profile's plan has %s of non-unit weights on the device, this engine %s (%s), so its peak %s exceeds %s; "+
				"a profile made with the embedding table in mapped host memory needs FT_EMBED_HOST on and a device that maps host memory "+
				"(one made under the minimum budget only FT_EMBED_HOST on), or make a new profile",
				ErrProfileMismatch, runtime.FormatBytes(st.FixedBytes), runtime.FormatBytes(e.fixedBytes), what, runtime.FormatBytes(peak), over)
		}
	}
	e.planIn.FixedBytes = e.fixedBytes
	e.plan.PeakBytes = peak
	e.budget, e.planIn.Budget = budget, budget
	return nil
}

// placeFromState uploads the non-unit, shared and resident weights and
// adopts the state's curve and plan.
func (e *engine) placeFromState(st *State) error {
	t := time.Now()
	e.planned = st.Plan.Resident
	err := e.uploadFixed()
	e.planned = nil
	if err != nil {
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
	e.budget, e.budgetMin = st.BudgetBytes, st.BudgetMin
	e.plan = Plan{Resident: st.Plan.Resident, Slots: st.Plan.Slots, SlotBytes: st.Plan.SlotBytes, SlotOf: st.Plan.SlotOf,
		Prefetch: st.Plan.Prefetch, PredictedSec: st.Plan.PredictedSec, FloorSec: st.Plan.FloorSec, PeakBytes: st.Plan.PeakBytes,
		PoolSlots: st.Plan.PoolSlots, PoolSlotBytes: st.Plan.PoolSlotBytes, ExpectedMissRate: st.Plan.ExpectedMissRate, ExpectedPoolBytes: st.Plan.ExpectedPoolBytes,
		Host: slices.Clone(st.Plan.Host)}
	// A later replan plans with this configuration's slot request (0 = the
	// planner chooses), not necessarily the profile's count.
	e.planIn = PlanInput{FixedBytes: st.FixedBytes, Budget: st.BudgetBytes, Slots: e.cfg.TransferBlocks, Curve: st.Curve, TransferScale: e.cfg.TransferBudgetScale,
		MaxAnnounced: st.MaxAnnounced}
	e.maxAnnounced = st.MaxAnnounced
	for i, u := range e.units {
		su := st.Units[i]
		u.samples = slices.Clone(su.Samples)
		u.announced, u.freq, u.calls = su.Announced, su.CallsPerPass, slices.Clone(su.Calls)
		// The packed sizes are the profile's (the streamed units' host
		// blocks are being filled on another goroutine now): packFor
		// measures each block again when it first packs it, and a unit
		// whose packed copy no longer fits its transfer block travels as
		// it is.
		e.planIn.Units = append(e.planIn.Units, PlanUnit{Name: su.Name, Bytes: su.Bytes, ComputeSec: su.ComputeSec, Announced: su.Announced,
			Calls: su.CallsPerPass, RunShare: runShare(su.Calls), CopyBytes: su.CopyBytes})
	}
	t = time.Now()
	err = e.placeResidentFrom(st.Plan.Resident)
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

// planState is the plan as saved.
func planState(p Plan) PlanState {
	return PlanState{Resident: p.Resident, Slots: p.Slots, SlotBytes: p.SlotBytes, SlotOf: p.SlotOf,
		Prefetch: p.Prefetch, PredictedSec: p.PredictedSec, FloorSec: p.FloorSec, PeakBytes: p.PeakBytes,
		PoolSlots: p.PoolSlots, PoolSlotBytes: p.PoolSlotBytes, ExpectedMissRate: p.ExpectedMissRate, ExpectedPoolBytes: p.ExpectedPoolBytes,
		Host: slices.Clone(p.Host)}
}

// countTrue is the number of true values in bs.
func countTrue(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}
