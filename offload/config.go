package offload

import (
	"errors"
	"fmt"
	"github.com/flextensor-go/flextensor/kernels"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/flextensor-go/flextensor/runtime"
)

// TimingMode selects what the engine measures during INFERENCE.
type TimingMode int

// The timing modes.
const (
	TimingOff   TimingMode = iota // measure nothing (the fastest)
	TimingEager                   // per trap per pass: transfer, compute and wait, from device events
	TimingGraph                   // as eager, published after each graph replay by UpdateOffloadTiming
)

// String names the timing mode.
func (m TimingMode) String() string {
	switch m {
	case TimingOff:
		return "off"
	case TimingEager:
		return "eager"
	case TimingGraph:
		return "graph"
	}
	return fmt.Sprintf("TimingMode(%d)", int(m))
}

// ParseTimingMode reads "off", "eager" or "graph".
func ParseTimingMode(s string) (TimingMode, error) {
	for _, m := range []TimingMode{TimingOff, TimingEager, TimingGraph} {
		if strings.EqualFold(s, m.String()) {
			return m, nil
		}
	}
	return TimingOff, fmt.Errorf("offload timing mode %q: want off, eager or graph", s)
}

// Budget is a device memory budget: Bytes, or a Fraction of the device's
// memory when Bytes is 0. The zero Budget means "no budget": everything may
// stay resident if it fits the device.
type Budget struct {
	Bytes    int64
	Fraction float64
	// Min marks Bytes as a model's minimum budget (Footprint.MinBudget,
	// Footprint.Min): it counts the gather-only embedding tables that
	// FT_EMBED_HOST keeps in mapped host memory as off the device, so an
	// engine that puts such a table on the device instead (the device
	// cannot map host memory, or mapping it failed) adds the table's bytes
	// back to the budget it plans under.
	Min bool
}

// ParseBudget reads "8GiB", "512MiB", "1.5GB", "123456" (bytes) or a
// fraction in (0, 1] such as "0.25".
func ParseBudget(s string) (Budget, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return Budget{}, errors.New("empty memory budget")
	}
	units := []struct {
		suffix string
		mult   float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	for _, u := range units {
		if strings.HasSuffix(strings.ToLower(t), strings.ToLower(u.suffix)) {
			num := strings.TrimSpace(t[:len(t)-len(u.suffix)])
			v, err := strconv.ParseFloat(num, 64)
			if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
				return Budget{}, fmt.Errorf("memory budget %q: %q is not a non-negative number", s, num)
			}
			return Budget{Bytes: int64(v * u.mult)}, nil
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return Budget{}, fmt.Errorf("memory budget %q: want bytes with a unit (8GiB, 512MiB) or a fraction of the device (0.25)", s)
	}
	if v > 0 && v <= 1 {
		return Budget{Fraction: v}, nil
	}
	if v != math.Trunc(v) {
		return Budget{}, fmt.Errorf("memory budget %q: a fraction must be in (0, 1]; bytes must be a whole number", s)
	}
	return Budget{Bytes: int64(v)}, nil
}

// Resolve turns the budget into bytes for a device of limit bytes (its
// DeviceCapacity: the memory limit, or a GPU's size; 0 = unknown). A
// fraction needs a known capacity.
func (b Budget) Resolve(limit int64) (int64, error) {
	switch {
	case b.Bytes > 0:
		return b.Bytes, nil
	case b.Fraction > 0:
		if limit <= 0 {
			return 0, fmt.Errorf("a budget of %.3g of the device needs a device memory limit or a device that reports its size (set a limit, or give bytes)", b.Fraction)
		}
		return int64(b.Fraction * float64(limit)), nil
	}
	return limit, nil
}

// DeviceCapacity is the memory a fractional budget is taken of on dev: its
// memory limit when it has one, otherwise its physical size when it reports
// one (a GPU's TotalMemory), otherwise 0 (unknown: a cpu device without a
// limit).
func DeviceCapacity(dev runtime.Device) int64 {
	if limit := dev.Memory().Limit; limit > 0 {
		return limit
	}
	if t, ok := dev.(interface{ TotalMemory() int64 }); ok {
		return max(t.TotalMemory(), 0)
	}
	return 0
}

// String prints the budget as given.
func (b Budget) String() string {
	switch {
	case b.Bytes > 0 && b.Min:
		return runtime.FormatBytes(b.Bytes) + " (the minimum)"
	case b.Bytes > 0:
		return runtime.FormatBytes(b.Bytes)
	case b.Fraction > 0:
		return fmt.Sprintf("%.3g of the device", b.Fraction)
	}
	return "unlimited"
}

// Config is an offload manager's configuration (the seed's OffloadConfig).
type Config struct {
	// Enabled false makes Offload a no-op: the model runs as it is.
	Enabled bool
	// Device is the compute device (the GPU; a CPU device runs the same
	// engine without one). Required when Enabled.
	Device runtime.Device
	// PinnedMemory packs streamed weights into page-locked host memory taken
	// from Device (fast copies); false uses ordinary Go memory.
	PinnedMemory bool
	// DiscoveryIters is the number of forwards in DISCOVERY (≥ 1).
	DiscoveryIters int
	// ProfilingIters is the number of recorded forwards in PROFILING (≥ 1);
	// compute times are their median.
	ProfilingIters int
	// Include and Exclude are globs over qualified module names ("*" matches
	// one dot-separated part, "**" any number); the outermost modules that
	// match Include and not Exclude are the units. With no Include the
	// model's own units (UnitSelector), else model.layers.* (ModelUnits).
	Include, Exclude []string
	// GPUBudget bounds the device bytes the engine takes (resident weights,
	// non-unit weights and transfer blocks); activations and KV caches are
	// the model's and not counted. It is a cap: a budget above the model's
	// size keeps every unit resident. Offload refuses a budget below the
	// least plan the planner can make (the non-unit weights plus one
	// transfer block of the largest unit, or TransferBlocks blocks sized
	// so that larger units stay resident, whichever needs least, plus one
	// pool slot for the largest expert) with an error wrapping ErrBudget,
	// on any device; a budget (or that least plan) over the device's free
	// memory, where the device knows it, with an error wrapping
	// runtime.ErrOutOfMemory. On a GPU without a memory limit a byte or
	// fractional budget is checked for what of it the model can use; the
	// zero Budget (the whole card) is not, only the least plan: its plan
	// keeps up to the card's size resident, not cut to the free memory.
	// On a device with a limit a fraction is cut to the free memory.
	GPUBudget Budget
	// TransferBlocks is the number of transfer slots; 0 lets the planner
	// choose (1 to 4).
	TransferBlocks int
	// TransferBudgetScale multiplies predicted copy times in planning (a
	// safety factor); 0 means 1.
	TransferBudgetScale float64
	// ProfileDir is where SaveProfile writes and LoadProfile reads.
	ProfileDir string
	// ProfileReadOnly forbids writing profiles.
	ProfileReadOnly bool
	// OffloadTiming selects the measurements taken during INFERENCE.
	OffloadTiming TimingMode
	// Progress, when set, is told how far long-running steps have come:
	// stage "weights" counts bytes placed (packed, uploaded or read), stage
	// "profiling" counts discovery and profiling passes. It may be called
	// from several goroutines.
	Progress func(stage string, done, total int64)
	// StreamDType, when set, is the dtype the units' Linear weights are
	// packed, streamed and multiplied in: runtime.F8E4M3 quantizes each
	// unit's BF16/F16/F32 Linear weights per output channel when the
	// engine takes the model (opt-in and lossy: see streamfp8.go). The zero
	// value keeps the weights as loaded.
	StreamDType runtime.DType
	// PoolEviction is the policy by which the expert cache's slots (the
	// data-dependent units' pool) are reused: EvictFrequency (the zero
	// value) or EvictLRU.
	PoolEviction EvictionPolicy
	// Trace, when set, receives how long the engine's set-up steps took
	// (diagnostics; "pack: pinned alloc" and "pack: read" are summed over the
	// goroutines that pack in parallel).
	Trace func(step string, d time.Duration)
	// HostBackend, when set, lets the planner compute units on the host
	// CPU (a third placement beside resident and streamed: host.go): a
	// backend on a CPU device (kernels/host's). Only forwards whose layer
	// loop asks nn.Tree.RunsOn compute host units (decoder.Model's
	// single-sequence Forward and Generate); before one that does not (its
	// batched ForwardBatch, as PlacementAsker says) the engine puts a plan
	// with no unit on the host in force (hostfree.go). nil: two-way plans.
	HostBackend kernels.Backend
	// HostUnits are globs over unit names placed on the host whatever the
	// planner finds (tests, experiments); they need HostBackend.
	HostUnits []string
	// StreamExp4 sends streamed units over the link exp4-packed
	// (kernels/exp4: 16-bit words in 12 bits, lossless, 0.75 of the bytes
	// of BF16 weights) and unpacks them on the device, on the copy stream,
	// with Unpacker: the planner times their copies by the packed bytes
	// and gives each transfer block room for both forms (exp4.go). It
	// needs Unpacker on the engine's device; not with StreamDType.
	StreamExp4 bool
	// Unpacker is the device backend StreamExp4 unpacks with.
	Unpacker kernels.Exp4Unpacker
}

// DefaultConfig is an enabled configuration for dev with the model's own
// units (no Include: see ModelUnits; each decoder layer for a dense model),
// 1 discovery and 2 profiling forwards, pinned memory and no budget.
func DefaultConfig(dev runtime.Device) Config {
	return Config{
		Enabled: true, Device: dev, PinnedMemory: true,
		DiscoveryIters: 1, ProfilingIters: 2,
	}
}

// validate checks the fields and fills defaults into a copy.
func (c Config) validate() (Config, error) {
	if !c.Enabled {
		return c, nil
	}
	if c.Device == nil {
		return c, errors.New("offload config: Device is required")
	}
	if c.DiscoveryIters == 0 {
		c.DiscoveryIters = 1
	}
	if c.ProfilingIters == 0 {
		c.ProfilingIters = 2
	}
	if c.DiscoveryIters < 0 || c.ProfilingIters < 0 {
		return c, fmt.Errorf("offload config: iterations must be positive (discovery %d, profiling %d)", c.DiscoveryIters, c.ProfilingIters)
	}
	if c.PoolEviction != EvictFrequency && c.PoolEviction != EvictLRU {
		return c, fmt.Errorf("offload config: PoolEviction %d is not a policy (EvictFrequency or EvictLRU)", int(c.PoolEviction))
	}
	if c.TransferBlocks < 0 {
		return c, fmt.Errorf("offload config: TransferBlocks %d is negative", c.TransferBlocks)
	}
	if c.TransferBudgetScale < 0 || math.IsNaN(c.TransferBudgetScale) {
		return c, fmt.Errorf("offload config: TransferBudgetScale %v is negative", c.TransferBudgetScale)
	}
	if c.TransferBudgetScale == 0 {
		c.TransferBudgetScale = 1
	}
	if !streamDTypeOK(c.StreamDType) {
		return c, fmt.Errorf("offload config: stream dtype %v is not supported (F8_E4M3, or unset for the weights' own)", c.StreamDType)
	}
	if c.StreamExp4 && c.Unpacker == nil {
		return c, fmt.Errorf("offload config: StreamExp4 needs an Unpacker (the device's backend) to unpack the streamed units")
	}
	if c.StreamExp4 && c.StreamDType != runtime.Invalid {
		return c, fmt.Errorf("offload config: StreamExp4 packs 16-bit words; not with stream dtype %v", c.StreamDType)
	}
	if len(c.HostUnits) > 0 && c.HostBackend == nil {
		return c, fmt.Errorf("offload config: HostUnits %q need a HostBackend to compute them", c.HostUnits)
	}
	if c.HostBackend != nil && c.HostBackend.Device().Kind() != runtime.KindCPU {
		return c, fmt.Errorf("offload config: HostBackend is on %s, want a CPU device", c.HostBackend.Device().Name())
	}
	if c.GPUBudget.Bytes < 0 || c.GPUBudget.Fraction < 0 || c.GPUBudget.Fraction > 1 {
		return c, fmt.Errorf("offload config: GPU budget of %d bytes, fraction %g: want bytes ≥ 0 or a fraction in (0, 1]", c.GPUBudget.Bytes, c.GPUBudget.Fraction)
	}
	return c, nil
}
