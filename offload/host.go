package offload

import (
	"fmt"
	"time"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// Host placement: with Config.HostBackend set, a unit may be computed on the
// host CPU. Its parameters are bound, zero-copy, to tensors of the host
// backend's (CPU) device that view the unit's packed host block (pinned
// memory the engine holds for a streamed unit anyway); the model runs it
// with the host backend on activations and a KV cache of its own on the
// host, and moves the hidden state across the link once each way per
// stretch of consecutive host units (decoder.Model does, asking
// nn.Tree.RunsOn). The copy stream keeps prefetching later streamed units
// while the host computes.
//
// Host compute per unit is first estimated: the unit's bytes over the host
// backend's GEMV bandwidth or the host's DRAM read bandwidth (host_dram.go),
// whichever is higher, the GEMV figure measured once when INFERENCE starts by
// multiplying one token through the largest unit's own matrices (from its
// host block) with the host backend, per token of the forward
// (planner_host.go). A forward of several tokens may cost the host less
// than that many single tokens (the products read each weight once for
// several tokens; kernels/host's AMX products of 16 or more are bound by
// compute, not by the weights' reads), so for such a forward the estimate
// is the lower of that and the same matrices timed at the forward's token
// count, per byte of the unit. The first passes under a plan with host units then time
// each host unit's whole forward and replan once with those times, per
// tokens-per-forward bucket (host_measure.go).

var _ nn.Elsewhere = (*engine)(nil)

// HiddenSizer is implemented by a model whose host-computed stretches move
// its hidden state between the device and the host: the bytes one token's
// hidden state takes (the hop the planner charges per crossing).
type HiddenSizer interface {
	HiddenStateBytes() int64
}

// HostBandwidthMeasurer is implemented by a host backend that reports the
// host's read bandwidth itself; the engine then skips its own GEMV timing.
type HostBandwidthMeasurer interface {
	HostBandwidth() float64
}

// RunsOn is the engine's nn.Elsewhere: the host backend for a unit the plan
// in force computes on the host, nil for everything else.
func (e *engine) RunsOn(m nn.Module) kernels.Backend {
	if e.phase != PhaseInference || e.cfg.HostBackend == nil {
		return nil
	}
	u := e.byMod[m]
	if u == nil || !u.onHost {
		return nil
	}
	e.asked = u
	return e.cfg.HostBackend
}

// hostDevice wraps host memory as buffers of the host backend's device.
type hostWrapper interface {
	Wrap(data []byte, label string) (*runtime.DeviceBuffer, error)
}

// bindHost binds u's parameters to host-device views of its host block.
func (e *engine) bindHost(u *unit) error {
	if u.hostViews == nil {
		if u.host == nil {
			return fmt.Errorf("offload: host unit %s has no host block", u.name)
		}
		w, ok := e.cfg.HostBackend.Device().(hostWrapper)
		if !ok {
			return fmt.Errorf("offload: the host backend's device %s cannot view host memory", e.cfg.HostBackend.Device().Name())
		}
		buf, err := w.Wrap(u.host.Bytes()[:u.bytes], "offload host unit "+u.name)
		if err != nil {
			return err
		}
		vs, err := u.viewsOn(buf)
		if err != nil {
			buf.Free()
			return err
		}
		u.hostWrap, u.hostViews = buf, vs
	}
	return u.bindViews(u.hostViews)
}

// dropHostViews forgets u's host views (before its host block is freed).
func (u *unit) dropHostViews() {
	if u.hostWrap != nil {
		u.hostWrap.Free()
	}
	u.hostWrap, u.hostViews = nil, nil
}

// enterHost is a host unit's entry in INFERENCE: the model must have asked
// where it runs (RunsOn) just before, so its caller computes it with the
// host backend.
func (e *engine) enterHost(u *unit) error {
	if e.asked != u {
		return fmt.Errorf("offload: unit %s is placed on the host but was entered without asking where it runs (nn.Tree.RunsOn); a model whose forwards do not all ask must say which do (offload.PlacementAsker), or be offloaded without Config.HostBackend", u.name)
	}
	e.asked = nil
	if err := e.bindHost(u); err != nil {
		return err
	}
	u.hostStart = time.Now()
	return nil
}

// exitHost records the host unit's wall time for the timing report.
func (e *engine) exitHost(u *unit) {
	u.hostLast = time.Since(u.hostStart).Seconds()
	e.hostMeasureRun(u)
	if e.measuring() && e.timing.rootStart != nil {
		e.timing.host = append(e.timing.host, hostRun{u, u.hostLast})
	}
}

// forcedHostUnits is the units Config.HostUnits places on the host (none
// without a host backend).
func (e *engine) forcedHostUnits() (map[*unit]bool, error) {
	forced := map[*unit]bool{}
	if e.cfg.HostBackend == nil || len(e.cfg.HostUnits) == 0 {
		return forced, nil
	}
	mods, err := nn.MatchOutermost(e.model, e.cfg.HostUnits, nil)
	if err != nil {
		return nil, err
	}
	for _, m := range mods {
		u := e.byMod[m]
		if u == nil {
			return nil, fmt.Errorf("offload config: HostUnits matches %s, which is not an offload unit", m.Node().Name())
		}
		forced[u] = true
	}
	if len(forced) == 0 {
		return nil, fmt.Errorf("offload config: HostUnits %q match no unit", e.cfg.HostUnits)
	}
	return forced, nil
}

// hostUnitErr is the error for a unit HostUnits names that cannot be
// computed on the host (hostInputs; leastPlan says it before profiling).
func hostUnitErr(name string) error {
	return fmt.Errorf("offload config: HostUnits names %s, which cannot be computed on the host (a data-dependent unit, or one reading another unit's parameters)", name)
}

// hostInputs fills the host fields of in: each unit's host seconds per
// token from the measured host bandwidth (and, with products set and
// several tokens a forward, the host's products timed at that count), the
// forced units, and the hop. A host-free bucket's plan (tokens.go) asks
// without products: its host fields are dropped.
func (e *engine) hostInputs(in *PlanInput, products bool) error {
	if e.cfg.HostBackend == nil {
		return nil
	}
	forced, err := e.forcedHostUnits()
	if err != nil {
		return err
	}
	if e.hostBW == 0 {
		bw, err := e.measureHostBW()
		if err != nil {
			return fmt.Errorf("measuring the host backend: %w", err)
		}
		dram, from, err := e.measureHostDRAM()
		if err != nil {
			return err
		}
		e.hostBW, e.hostDRAM, e.hostDRAMFrom = bw, dram, from
	}
	in.HostReadBytesPerSec = e.hostDRAM
	in.TransferScale = e.transferScale(in.Tokens) // copies measured beside host units (host_copyrate.go)
	// The estimate is a lower bound: no unit reads its weights faster than
	// the faster of the GEMV figure and the DRAM read figure (the one-op
	// layer reaches the latter, separate GEMVs do not: host_dram.go). A
	// figure the backend reports itself (HostBandwidthMeasurer) stands.
	estBW := max(e.hostBW, e.hostDRAM)
	if bm, ok := e.cfg.HostBackend.(HostBandwidthMeasurer); ok && bm.HostBandwidth() > 0 {
		estBW = e.hostBW
	}
	// Each unit's estimate is scaled by its block's read rate against the
	// fastest block's (host_blocks.go; 1 without rates).
	ref := e.maxBlockRate()
	perByte := 1 / estBW // host seconds a byte of weights, a token
	if products && in.Tokens > 1 && !fixedBW(e.cfg.HostBackend) {
		prod, err := e.hostProducts(in.Tokens)
		if err != nil {
			return fmt.Errorf("timing the host backend's products of %d tokens: %w", in.Tokens, err)
		}
		perByte = min(perByte, prod/float64(min(in.Tokens, hostProdMaxTokens)))
	}
	est := func(u *unit) float64 { return float64(u.bytes) * perByte * e.rateFactor(u, ref) }
	ratio := e.hm.hostRatio(in.Tokens, est)
	for i, u := range e.units {
		if u.announced || len(u.shared) > 0 {
			if forced[u] {
				return hostUnitErr(u.name)
			}
			continue
		}
		in.Units[i].HostSecPerToken = e.hm.hostSecPerToken(u, in.Tokens, est(u), ratio)
		in.Units[i].ForceHost = forced[u]
	}
	if hs, ok := e.model.(HiddenSizer); ok && len(in.Curve.Points) > 0 {
		in.HopSec = in.Curve.Time(hs.HiddenStateBytes() * int64(max(in.Tokens, 1)))
	}
	return nil
}

// fixedBW reports whether the host backend fixes its rate itself
// (HostBandwidthMeasurer reporting more than 0: FT_HOST_GBPS), which then
// stands for every token count.
func fixedBW(hb kernels.Backend) bool {
	bm, ok := hb.(HostBandwidthMeasurer)
	return ok && bm.HostBandwidth() > 0
}

// hostProdMaxTokens is the most tokens the host products are timed at: a
// larger forward takes that figure (its products cost at least as much a
// token), so that timing a prefill's products does not stall the start.
const hostProdMaxTokens = 256

// hostProducts is the host backend's seconds a weight byte for products
// of tokens rows (at most hostProdMaxTokens), timed once per count through
// the largest unit's matrices.
func (e *engine) hostProducts(tokens int) (float64, error) {
	tokens = min(tokens, hostProdMaxTokens)
	if s, ok := e.hostProd[tokens]; ok {
		return s, nil
	}
	bytes, sec, err := e.timeHostProducts(tokens)
	if err != nil {
		return 0, err
	}
	if e.hostProd == nil {
		e.hostProd = map[int]float64{}
	}
	e.hostProd[tokens] = sec / float64(bytes)
	return e.hostProd[tokens], nil
}

// measureHostBW times one token through the largest unit's 2-D weights
// (the fastest-reading block among the largest, when rated) with the host
// backend (best of 3) and returns bytes a second.
func (e *engine) measureHostBW() (float64, error) {
	if bm, ok := e.cfg.HostBackend.(HostBandwidthMeasurer); ok {
		if bw := bm.HostBandwidth(); bw > 0 {
			return bw, nil
		}
	}
	bytes, sec, err := e.timeHostProducts(1)
	if err != nil {
		return 0, err
	}
	return float64(bytes) / max(sec, 1e-9), nil
}

// timeHostProducts multiplies tokens rows through the largest unit's 2-D
// weights (the fastest-reading block among the largest, when rated) with
// the host backend and returns their bytes and the best of 3 times.
func (e *engine) timeHostProducts(tokens int) (int64, float64, error) {
	// The largest unit; among equally large ones the one whose block reads
	// fastest (host_blocks.go), so the figure is the fast memory's, which
	// rateFactor scales from.
	var big *unit
	for _, u := range e.units {
		if !u.announced && u.host != nil && (big == nil || u.bytes > big.bytes || u.bytes == big.bytes && u.hostRate > big.hostRate) {
			big = u
		}
	}
	if big == nil {
		return 0, 0, fmt.Errorf("no unit to time")
	}
	hb := e.cfg.HostBackend
	w, ok := hb.Device().(hostWrapper)
	if !ok {
		return 0, 0, fmt.Errorf("the host backend's device %s cannot view host memory", hb.Device().Name())
	}
	buf, err := w.Wrap(big.host.Bytes()[:big.bytes], "offload host timing "+big.name)
	if err != nil {
		return 0, 0, err
	}
	defer buf.Free()
	vs, err := big.viewsOn(buf)
	if err != nil {
		return 0, 0, err
	}
	type mm struct{ x, out, w *runtime.Tensor }
	var mms []mm
	var bytes int64
	defer func() {
		for _, m := range mms {
			m.x.Buffer().Free()
			m.out.Buffer().Free()
		}
	}()
	for _, v := range vs {
		if len(v.Shape()) != 2 || (v.DType() != runtime.BF16 && v.DType() != runtime.F32 && v.DType() != runtime.F16) {
			continue
		}
		x, err := runtime.NewTensor(hb.Device(), runtime.F32, runtime.Shape{tokens, v.Dim(1)}, "host timing x")
		if err != nil {
			return 0, 0, err
		}
		out, err := runtime.NewTensor(hb.Device(), runtime.F32, runtime.Shape{tokens, v.Dim(0)}, "host timing out")
		if err != nil {
			x.Buffer().Free()
			return 0, 0, err
		}
		mms = append(mms, mm{x, out, v})
		bytes += v.NumBytes()
	}
	if len(mms) == 0 {
		return 0, 0, fmt.Errorf("unit %s has no BF16/F16/F32 matrix to time", big.name)
	}
	best := -1.0
	for rep := 0; rep < 3; rep++ {
		t0 := time.Now()
		for _, m := range mms {
			if err := hb.MatMul(m.out, m.x, m.w); err != nil {
				return 0, 0, err
			}
		}
		if s := time.Since(t0).Seconds(); best < 0 || s < best {
			best = s
		}
	}
	return bytes, max(best, 1e-9), nil
}

// HostBandwidth is the host backend's GEMV bandwidth (bytes a second) the
// planner used, 0 before INFERENCE or without a host backend.
func (m *Manager) HostBandwidth() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.e == nil {
		return 0
	}
	return m.e.hostBW
}

// HostProductRate is the rate the host backend's products of tokens rows
// were timed at for the planner's estimate, in weight bytes × tokens a
// second (0: not timed: no host backend, a forward of one token, or the
// rate fixed by FT_HOST_GBPS). Counts past hostProdMaxTokens read that
// figure.
func (m *Manager) HostProductRate(tokens int) float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.e == nil {
		return 0
	}
	t := min(tokens, hostProdMaxTokens)
	if s := m.e.hostProd[t]; s > 0 {
		return float64(t) / s
	}
	return 0
}

// HostUnits lists the units the plan in force computes on the host
// (INFERENCE; empty before or without a host backend).
func (m *Manager) HostUnits() []NamedModule {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []NamedModule
	if m.e == nil || m.e.phase != PhaseInference {
		return out
	}
	for _, u := range m.e.units {
		if u.onHost {
			out = append(out, NamedModule{u.name, u.mod})
		}
	}
	return out
}

// HostUnits lists the named manager's host-computed units.
func HostUnits(name string) []NamedModule { return GetOffloadManager(name).HostUnits() }
