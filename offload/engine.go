package offload

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/flextensor-go/flextensor/kernels/exp4"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/place"
	"github.com/flextensor-go/flextensor/runtime"
)

// blockAlign is the alignment of each parameter inside a packed block.
const blockAlign = 256

func alignUp(n int64) int64 { return (n + blockAlign - 1) / blockAlign * blockAlign }

// unit is one offload unit: the parameters its subtree owns, packed once into
// one host block.
type unit struct {
	idx      int
	name     string
	mod      nn.Module
	params   []*nn.Parameter
	orig     []*runtime.Tensor
	offs     []int64
	bytes    int64
	host     *runtime.HostBuffer   // packed weights; freed once the unit is resident
	dev      *runtime.DeviceBuffer // the resident copy (INFERENCE)
	resident bool
	slot     int // transfer slot of a streamed unit
	pos      int // a streamed unit's position in the ring's run order
	samples  []float64
	views    map[*runtime.DeviceBuffer][]*runtime.Tensor
	shared   map[*nn.Parameter]bool // parameters made resident because another unit reads them
	// per-pass state
	start, end runtime.Event
	waitStart  runtime.Event
	copyRec    *copyTiming
	runs       [][2]runtime.Event // DISCOVERY, PROFILING: this pass's runs (start, end)

	// Data-dependent units (pool.go).
	announced   bool        // called by a module that announces its children
	pslot       int         // pool slot holding a streamed announced unit's weights, -1 for none
	copied      bool        // a copy into pslot was issued for the unit's next entry
	pendingCopy *copyTiming // that copy's timing (timed copies)
	lastHit     bool        // the latest entry found the weights without a copy
	calls       []float64   // calls in each profiled pass
	freq        float64     // calls per pass (profiled)
	seen        int64       // entries counted in INFERENCE
	poolBuf     *runtime.DeviceBuffer
	poolViews   []*runtime.Tensor // views of poolBuf (bindPooled)

	// Host placement (host.go).
	onHost    bool                  // the plan in force computes the unit on the host
	hostWrap  *runtime.DeviceBuffer // the host block as a buffer of the host backend's device
	hostViews []*runtime.Tensor     // views of hostWrap
	hostStart time.Time
	hostLast  float64 // the latest host run's wall seconds
	hostRate  float64 // its host block's read rate, bytes a second, 0: not rated (host_blocks.go)

	// Packed copies (Config.StreamExp4, exp4.go).
	packed     *runtime.HostBuffer // the host block exp4-packed, made when the unit first streams
	packLayout exp4.Layout         // packed's sections
	packBytes  int64               // the packed size (0: not known yet), what the planner times its copy by
	packSizing *exp4.Sizing        // the pass that measured packBytes, kept for the packing (then dropped)
}

// copyTiming holds the events around one copy.
type copyTiming struct {
	start, end runtime.Event
	bytes      int64
}

// engine is the state of one offloaded model.
type engine struct {
	// exitEvents counts the events exitInference recorded (the tests
	// check that resident units outside measured passes record none).
	exitEvents int
	m          *Manager
	cfg        Config
	dev        runtime.Device
	model      nn.Module
	tree       *nn.Tree
	units      []*unit
	byMod      map[nn.Module]*unit
	owner      map[*nn.Parameter]*unit
	phase      Phase
	passes     int
	copy       runtime.Stream
	src        WeightSource
	unhook     func()
	active     *unit
	failed     error
	// inForward is true between the root's entry and exit.
	inForward bool
	staging   *runtime.DeviceBuffer

	// Non-unit parameters, uploaded at Offload, and parameters shared between
	// units, uploaded when discovery finds them.
	fixed       []*nn.Parameter
	fixedOrig   []*runtime.Tensor
	fixedBufs   []*runtime.DeviceBuffer
	fixedBytes  int64
	hostTables  []hostTable           // non-unit tables in mapped host memory, not in fixedBytes (embedhost.go)
	hostPending map[*nn.Parameter]int // tables uploadFixed left for placeHostTables: index in fixed
	devTables   []deviceTable         // embedding tables left on the device, and why (embedhost.go)
	planned     []bool                // a profile's resident flags, set while it places the weights (offloading)
	discoverErr error

	// INFERENCE
	curve  H2DCurve
	plan   Plan
	planIn PlanInput
	budget int64
	ring   *ring // the transfer slots of the streamed units
	pool   *pool // the slots of the streamed announced units (pool.go)
	// budgetMin: budget is a Min budget (Budget.Min, or a profile saved
	// under one), which grows by the bytes of counted tables put on the
	// device (embedhost.go budgetBytes, profile.go checkFixedFromState).
	budgetMin bool

	// Data-dependent units: the modules that announced children, the most
	// units one announcement named, and INFERENCE's counts.
	announcers   map[nn.Module]bool
	maxAnnounced int
	annScratch   []*unit
	announceErr  error
	annPass      PoolStats // this pass's calls of resident announced units
	annPassMax   int       // INFERENCE: the most units one announcement of this pass named
	poolTotal    PoolStats

	timing timingState

	asked  *unit   // the host unit RunsOn named last (host.go)
	hostBW float64 // the host backend's measured GEMV bytes a second
	// hostProd is, per forward's token count (a bucket past 1), the host
	// backend's measured seconds a weight byte for products of that many
	// tokens (host.go's hostProducts; capped at hostProdMaxTokens).
	hostProd map[int]float64
	hm       hostMeasure // measured host times per unit (host_measure.go)

	// hostDRAM is the host's DRAM read bandwidth the planner's shared-read
	// model uses (bytes a second; host_dram.go), hostDRAMFrom where it came
	// from; set with hostBW.
	hostDRAM     float64
	hostDRAMFrom string

	replan replanState

	tok tokenPlans // plans per tokens per forward (tokens.go)

	// The pass in progress and the last one finished (passinfo.go).
	pass, lastPass     PassInfo
	passSeq, passSlots int
	passRes, passHost  []bool

	st *stager // packs units into host blocks, uploads weights

	rateBlocksOn bool // FT_HOST_BLOCK_RATES is not "0" (host_blocks.go)
	embedHost    bool // FT_EMBED_HOST is not "0" (embedhost.go)
	copyMeasure  bool // FT_HOST_COPY_MEASURE is not "0" (host_copyrate.go)
	reallocTries int  // FT_HOST_BLOCK_REALLOC (host_blocks_realloc.go)

	// opts are the Offload options the engine was built with (LoadProfile
	// rebuilds it with them); compiled is true when they had a compile
	// function (ExternalCompileActive).
	opts     offloadOptions
	compiled bool
	// noReplan refuses RequestStrategyReplan (OffloadFromState with
	// allowStrategyReplan false).
	noReplan bool
	quant    []quantized // Linears switched to FP8 for Config.StreamDType (streamfp8.go)

	progMu    sync.Mutex
	progDone  int64
	progTotal int64
}

// trace reports a step's duration to the configured Trace.
func (e *engine) trace(step string, d time.Duration) {
	if e.cfg.Trace != nil {
		e.cfg.Trace(step, d)
	}
}

// placed reports n more weight bytes placed to the configured Progress.
func (e *engine) placed(n int64) {
	if e.cfg.Progress == nil {
		return
	}
	e.progMu.Lock()
	e.progDone += n
	done, total := e.progDone, e.progTotal
	e.progMu.Unlock()
	e.cfg.Progress("weights", done, total)
}

// weightTotal sets the bytes the "weights" stage will place.
func (e *engine) weightTotal() {
	var n int64
	for _, u := range e.units {
		n += u.bytes
	}
	for _, t := range e.fixedOrig {
		n += t.NumBytes()
	}
	e.progMu.Lock()
	e.progDone, e.progTotal = 0, n
	e.progMu.Unlock()
}

func newEngine(m *Manager, model nn.Module, cfg Config, o offloadOptions) (_ *engine, err error) {
	e, err := buildEngine(m, model, cfg, nil)
	if err != nil {
		return nil, err
	}
	if o.compile != nil {
		if err := applyCompile(e.units, o.compile); err != nil {
			e.unquantize()
			e.closeStream()
			return nil, err
		}
	}
	e.opts, e.compiled = o, o.compile != nil
	if err := e.startDiscovery(); err != nil {
		e.restore() // uploadFixed may have bound parameters to device views freed below
		e.freeAll()
		e.closeStream()
		return nil, err
	}
	return e, nil
}

// buildEngine finds the units and their parameters. With src nil the
// parameters' tensors must be in host memory; with a source they only need
// shapes and dtypes (meta tensors).
func buildEngine(m *Manager, model nn.Module, cfg Config, src WeightSource) (_ *engine, err error) {
	if len(cfg.Include) == 0 {
		cfg.Include, cfg.Exclude = ModelUnits(model)
	}
	e := &engine{m: m, cfg: cfg, dev: cfg.Device, model: model, tree: model.Node().Tree(), src: src, timing: timingState{lastGen: -1},
		byMod: map[nn.Module]*unit{}, owner: map[*nn.Parameter]*unit{}, announcers: map[nn.Module]bool{}}
	e.st = newStager(e)
	if e.rateBlocksOn, err = hostBlockRatesOn(); err != nil {
		return nil, err
	}
	if e.embedHost, err = embedHostOn(); err != nil {
		return nil, err
	}
	if e.copyMeasure, err = hostCopyMeasureOn(); err != nil {
		return nil, err
	}
	if e.reallocTries, err = hostBlockRealloc(); err != nil {
		return nil, err
	}
	e.traceReallocIdle()
	mods, err := nn.MatchOutermost(model, cfg.Include, cfg.Exclude)
	if err != nil {
		return nil, err
	}
	if len(mods) == 0 {
		return nil, fmt.Errorf("%w: include %q, exclude %q; modules are named like %s",
			ErrNothingIncluded, cfg.Include, cfg.Exclude, exampleNames(model))
	}
	if err := e.quantizeUnits(mods); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			e.unquantize()
		}
	}()
	check := func(p *nn.Parameter) error {
		t := p.Peek()
		if t == nil {
			return fmt.Errorf("parameter %s has no tensor bound; load the weights before Offload", p.Name())
		}
		if src == nil && t.Bytes() == nil && t.Device() != e.dev {
			return fmt.Errorf("parameter %s is on %s, not in host memory; build the model on a cpu device so the engine can place its weights", p.Name(), t.Device().Name())
		}
		if src != nil {
			info, err := src.Info(p.Name())
			if err != nil {
				return err
			}
			if info.DType != t.DType() || !runtime.Shape(info.Shape).Equal(t.Shape()) {
				return fmt.Errorf("%s: tensor %s is %v %v, the model's parameter %v %v",
					place.Describe(src), p.Name(), info.DType, runtime.Shape(info.Shape), t.DType(), t.Shape())
			}
		}
		return nil
	}
	for i, mod := range mods {
		u := &unit{idx: i, name: mod.Node().Name(), mod: mod, views: map[*runtime.DeviceBuffer][]*runtime.Tensor{}, shared: map[*nn.Parameter]bool{}, pslot: -1}
		for _, p := range nn.Parameters(mod) {
			if p.Owner() == nil || !under(p.Owner(), mod) {
				continue // a parameter another module owns (tied weights): not this unit's
			}
			if err := check(p); err != nil {
				return nil, err
			}
			if src == nil && p.Peek().Bytes() == nil {
				return nil, fmt.Errorf("parameter %s of unit %s is on %s, not in host memory; build the model on a cpu device", p.Name(), u.name, p.Peek().Device().Name())
			}
			t := p.Peek()
			u.params = append(u.params, p)
			u.orig = append(u.orig, t)
			u.offs = append(u.offs, u.bytes)
			u.bytes = alignUp(u.bytes + t.NumBytes())
			e.owner[p] = u
		}
		e.units = append(e.units, u)
		e.byMod[mod] = u
	}
	for _, p := range nn.Parameters(model) {
		if e.owner[p] == nil {
			if err := check(p); err != nil {
				return nil, err
			}
			e.fixed = append(e.fixed, p)
			e.fixedOrig = append(e.fixedOrig, p.Peek())
		}
	}
	if e.copy, err = e.dev.NewStream("offload copy"); err != nil {
		return nil, err
	}
	return e, nil
}

// startDiscovery places the non-unit parameters, packs every unit into its
// host block and installs the traps: the engine enters DISCOVERY.
func (e *engine) startDiscovery() error {
	e.weightTotal()
	if err := e.uploadFixed(); err != nil {
		return err
	}
	// Before the host packing and the staging block: a budget or transfer
	// blocks that cannot fit fail here, not at the plan after profiling.
	if err := e.checkDeviceFit(e.ownDeviceBytes()); err != nil {
		return err
	}
	e.st.freeStaging()
	if err := e.st.packAll(e.units); err != nil {
		return err
	}
	if err := e.rateBlocks(e.units); err != nil {
		return err
	}
	if err := e.placeHostTables(); err != nil {
		return err
	}
	var maxBytes int64
	for _, u := range e.units {
		maxBytes = max(maxBytes, u.bytes)
	}
	var err error
	if e.staging, err = e.dev.Alloc(max(maxBytes, 1), "offload staging block"); err != nil {
		return err
	}
	e.phase = PhaseDiscovery
	e.tree.SetReadObserver(e.observe)
	e.unhook = e.tree.AddHook(e)
	return nil
}

func (e *engine) closeStream() {
	if e.copy != nil {
		e.copy.Close()
		e.copy = nil
	}
}

// under reports whether m is mod or inside mod's subtree.
func under(m, mod nn.Module) bool {
	name, root := m.Node().Name(), mod.Node().Name()
	return name == root || root == "" || strings.HasPrefix(name, root+".")
}

func exampleNames(root nn.Module) string {
	var names []string
	for _, m := range nn.Modules(root) {
		if n := m.Node().Name(); n != "" {
			names = append(names, n)
		}
		if len(names) == 4 {
			break
		}
	}
	return strings.Join(names, ", ")
}

// syncCopy copies n bytes host→device on the copy stream after the compute
// stream's work so far, and makes the compute stream wait for it.
func (e *engine) syncCopy(dst *runtime.DeviceBuffer, src *runtime.HostBuffer, n int64) error {
	c := e.dev.Compute()
	ev, err := c.Record()
	if err != nil {
		return err
	}
	if err := e.copy.Wait(ev); err != nil {
		return err
	}
	if err := e.copy.CopyH2D(dst, 0, src, 0, n); err != nil {
		return err
	}
	done, err := e.copy.Record()
	if err != nil {
		return err
	}
	return c.Wait(done)
}

// bindTo points u's parameters at views of buf (cached per buffer).
func (e *engine) bindTo(u *unit, buf *runtime.DeviceBuffer) error {
	vs, ok := u.views[buf]
	if !ok {
		var err error
		if vs, err = u.viewsOn(buf); err != nil {
			return err
		}
		u.views[buf] = vs
	}
	return u.bindViews(vs)
}

// viewsOn makes views of buf for u's parameters, at their packed offsets.
func (u *unit) viewsOn(buf *runtime.DeviceBuffer) ([]*runtime.Tensor, error) {
	vs := make([]*runtime.Tensor, 0, len(u.orig))
	for i, t := range u.orig {
		v, err := runtime.TensorOn(buf, u.offs[i], t.DType(), t.Shape())
		if err != nil {
			return nil, err
		}
		vs = append(vs, v)
	}
	return vs, nil
}

// bindViews binds u's parameters (but the shared ones) to vs.
func (u *unit) bindViews(vs []*runtime.Tensor) error {
	for i, p := range u.params {
		if u.shared[p] {
			continue
		}
		if err := p.Bind(vs[i]); err != nil {
			return err
		}
	}
	return nil
}

// bindPooled binds a pooled unit to buf. A pooled unit visits many slots
// over a run (thousands of experts, hundreds of slots): it keeps the views
// of its latest slot only, not one set per slot.
func (e *engine) bindPooled(u *unit, buf *runtime.DeviceBuffer) error {
	if u.poolBuf != buf {
		vs, err := u.viewsOn(buf)
		if err != nil {
			return err
		}
		u.poolBuf, u.poolViews = buf, vs
	}
	return u.bindViews(u.poolViews)
}

// observe is the read observer during DISCOVERY: a parameter of one unit
// read outside that unit is made resident, so every unit can read it.
func (e *engine) observe(p *nn.Parameter) {
	u := e.owner[p]
	if u == nil || u == e.active || u.shared[p] {
		return
	}
	i := slices.Index(u.params, p)
	if err := p.Bind(u.orig[i]); err != nil && e.discoverErr == nil {
		e.discoverErr = err
		return
	}
	if err := e.uploadParams([]*nn.Parameter{p}, []*runtime.Tensor{u.orig[i]}, "offload shared parameter "+p.Name()); err != nil && e.discoverErr == nil {
		e.discoverErr = fmt.Errorf("making shared parameter %s resident: %w", p.Name(), err)
		return
	}
	u.shared[p] = true
}

// Enter is the trap at each module's entry.
func (e *engine) Enter(mod nn.Module) error {
	if mod == e.model {
		// The manager stays locked for the pass (Exit unlocks it); an entry
		// that fails or panics gives the lock back here, as nn.Call runs no
		// Exit for it.
		e.m.mu.Lock()
		entered := false
		defer func() {
			if !entered {
				e.m.mu.Unlock()
			}
		}()
		if e.failed != nil {
			return fmt.Errorf("%w: %v", ErrEngineFailed, e.failed)
		}
		if err := e.beginPass(); err != nil {
			return err
		}
		e.inForward, entered = true, true
		return nil
	}
	u := e.byMod[mod]
	if u == nil {
		return nil
	}
	if e.active != nil {
		return fmt.Errorf("offload: unit %s entered inside unit %s", u.name, e.active.name)
	}
	e.active = u
	var err error
	if e.phase == PhaseInference && u.onHost {
		err = e.enterHost(u)
	} else if e.phase == PhaseInference {
		err = e.enterInference(u)
	} else {
		err = e.enterStaged(u)
	}
	if err != nil {
		e.active = nil
	}
	return err
}

// Exit is the trap at each module's exit.
func (e *engine) Exit(mod nn.Module, ferr error) error {
	if mod == e.model {
		// Unlocked even when finishing panics. After a panicking forward
		// ferr wraps nn.ErrPanicked: the pass is abandoned like a failed
		// one (copies drained, slots freed) before the panic goes on.
		defer e.m.mu.Unlock()
		e.inForward = false
		return e.finishPass(ferr)
	}
	u := e.byMod[mod]
	if u == nil {
		return ferr
	}
	e.active = nil
	var err error
	if e.phase == PhaseInference && u.onHost {
		e.exitHost(u)
	} else if e.phase == PhaseInference {
		err = e.exitInference(u)
	} else {
		err = e.exitStaged(u)
	}
	return errors.Join(ferr, err)
}

func (e *engine) beginPass() error {
	e.annPassMax = 0
	if err := e.tokensBegin(); err != nil {
		return err
	}
	e.hostMeasureBegin()
	e.passBegin()
	if e.phase == PhaseInference && e.measuring() {
		return e.timing.begin(e)
	}
	return nil
}

// measuring reports whether INFERENCE passes record unit events: for the
// timing report, or for a strategy replan's measurement.
func (e *engine) measuring() bool {
	return e.cfg.OffloadTiming != TimingOff || e.replan.state == ReplanInProgress || e.tok.measure != nil
}

// InnerTrapsIdle implements nn.Idler: in the forward now running (asked
// by the goroutine that entered the root, which holds the manager), the
// traps of the units would do nothing. That is an INFERENCE pass of a plan
// that streams nothing (no ring, no pool of streamed experts), computes
// nothing on the host, announces no units (their calls are counted) and
// measures nothing (no timing, replan or token-count measurement). The
// decoder then replays its one-token step as one recorded graph inside the
// root's traps instead of running the units one by one.
func (e *engine) InnerTrapsIdle() bool {
	if !e.inForward || e.phase != PhaseInference || e.failed != nil || e.active != nil || e.measuring() || e.hm.on ||
		(e.ring != nil && len(e.ring.order) > 0) || e.pool != nil || e.plan.HostUnits() > 0 {
		return false
	}
	for _, u := range e.units {
		if !u.resident || u.onHost || u.announced {
			return false
		}
	}
	return true
}

// finishPass ends one forward of the root: after a failure the pipeline is
// drained and restarted at a pass boundary; otherwise the phase advances.
func (e *engine) finishPass(ferr error) error {
	e.active = nil
	if e.discoverErr != nil {
		ferr = errors.Join(ferr, e.discoverErr)
		e.discoverErr = nil
	}
	if e.announceErr != nil {
		ferr = errors.Join(ferr, e.announceErr)
		e.announceErr = nil
	}
	if ferr == nil {
		ferr = e.checkPassComplete()
	}
	if ferr != nil {
		e.resync()
		return ferr
	}
	if err := e.endPass(e.m.suspended > 0); err != nil {
		if e.failed == nil {
			e.resync() // a failed end of pass (timing) may leave copies in flight
		}
		return err
	}
	e.passEnd()
	return nil
}

// checkPassComplete is the one place a pass that ended early is caught: in
// INFERENCE every pass must run the plan's streamed units in full (the ring
// prefetches the next pass's first units as this one's last ones run, so a
// pass that skips units would leave the next, correct pass out of step).
// A pass that entered fewer streamed units than the plan holds is an error
// of that pass, naming the first unit it did not run; the caller resyncs, so
// the next pass starts clean. Data-dependent units (a mixture of experts)
// are not in the ring: they may be skipped or run twice (pool.go).
func (e *engine) checkPassComplete() error {
	if e.phase != PhaseInference || e.ring == nil || len(e.ring.order) == 0 {
		return nil
	}
	n := len(e.ring.order)
	ran := e.ring.entered % n
	if ran == 0 {
		return nil
	}
	return fmt.Errorf("offload: the pass ended after %d of the plan's %d streamed units; %s was not run (units must run in the same order every pass)",
		ran, n, e.ring.order[ran].name)
}

// resync waits for all copies and forgets in-flight prefetches, so the next
// forward starts from idle slots. A stream whose copy failed keeps failing
// (the error is sticky), so it is replaced by a new one; when no new stream
// can be made the engine fails.
func (e *engine) resync() {
	if err := e.copy.Synchronize(); err != nil {
		_ = e.copy.Close()
		s, serr := e.dev.NewStream("offload copy")
		if serr != nil {
			e.fail(fmt.Errorf("copy stream failed (%v) and cannot be replaced: %w", err, serr))
		} else {
			e.copy = s
			if e.ring != nil {
				e.ring.copy = s
			}
			if e.pool != nil {
				e.pool.copy = s
			}
		}
	}
	_ = e.dev.Compute().Synchronize()
	if e.phase != PhaseInference {
		e.clearPassEvents() // a failed pass's runs count for nothing
	}
	if e.phase == PhaseInference {
		if e.ring != nil {
			e.ring.reset()
		}
		if e.pool != nil {
			e.pool.reset()
		}
		e.annPass = PoolStats{}
		e.timing.abort()
		e.tok.measure = nil
	}
}

// endPass advances the phase after one forward (or UpdateState).
func (e *engine) endPass(suspended bool) error {
	switch e.phase {
	case PhaseDiscovery:
		e.markRepeated()
		e.clearPassEvents()
		e.passes++
		e.passProgress()
		if e.passes >= e.cfg.DiscoveryIters {
			e.tree.SetReadObserver(nil)
			e.phase, e.passes = PhaseProfiling, 0
		}
	case PhaseProfiling:
		if suspended {
			e.clearPassEvents()
			return nil
		}
		if err := e.collectSamples(); err != nil {
			return e.fail(err)
		}
		if e.tok.passT > 0 {
			e.tok.profiled = append(e.tok.profiled, float64(e.tok.passT))
		}
		e.passes++
		e.passProgress()
		if e.passes >= e.cfg.ProfilingIters {
			if err := e.startInference(); err != nil {
				return e.fail(err)
			}
		}
	case PhaseInference:
		e.endPoolPass()
		if e.tok.measure != nil {
			if err := e.tokensCollect(); err != nil {
				return err
			}
		}
		if e.replan.state == ReplanInProgress {
			if err := e.replanCollect(); err != nil {
				return err
			}
			if !e.replan.manual {
				if err := e.replanStep(); err != nil {
					return err
				}
			}
		}
		if e.hm.on {
			if err := e.hostMeasureEnd(); err != nil {
				return err
			}
		}
		if e.cfg.OffloadTiming != TimingOff {
			// Forwards whose traps ran publish themselves in both modes.
			return e.timing.end(e)
		}
		e.timing.abort()
	}
	return nil
}

// passProgress reports the discovery and profiling passes done.
func (e *engine) passProgress() {
	if e.cfg.Progress == nil {
		return
	}
	done := int64(e.passes)
	if e.phase == PhaseProfiling {
		done += int64(e.cfg.DiscoveryIters)
	}
	e.cfg.Progress("profiling", done, int64(e.cfg.DiscoveryIters+e.cfg.ProfilingIters))
}

// fail marks the engine unusable: later forwards return ErrEngineFailed.
func (e *engine) fail(err error) error {
	e.failed = err
	if e.m != nil && e.m.e == e {
		e.m.failed.Store(&err)
	}
	return err
}

// enterStaged (DISCOVERY, PROFILING): copy the unit into the staging block
// and wait for it, then time its compute.
func (e *engine) enterStaged(u *unit) error {
	if err := e.syncCopy(e.staging, u.host, u.bytes); err != nil {
		return err
	}
	if err := e.bindTo(u, e.staging); err != nil {
		return err
	}
	ev, err := e.dev.Compute().Record()
	u.start = ev
	return err
}

func (e *engine) exitStaged(u *unit) error {
	ev, err := e.dev.Compute().Record()
	u.end = ev
	if err == nil && u.start != nil {
		u.runs = append(u.runs, [2]runtime.Event{u.start, ev})
	}
	return err
}

func (e *engine) clearPassEvents() {
	for _, u := range e.units {
		u.start, u.end, u.runs = nil, nil, u.runs[:0]
	}
}

// collectSamples records each unit's compute time per call and its calls
// in the pass just ended (a unit that did not run has 0 calls and no time
// sample).
func (e *engine) collectSamples() error {
	if err := e.dev.Compute().Synchronize(); err != nil {
		return err
	}
	ran := e.markRepeated()
	for _, u := range e.units {
		if ran {
			u.calls = append(u.calls, float64(len(u.runs)))
		}
		if len(u.runs) == 0 {
			continue // the unit did not run in this pass
		}
		var sec float64
		for _, r := range u.runs {
			d, err := r[1].ElapsedSince(r[0])
			if err != nil {
				return err
			}
			sec += d.Seconds()
		}
		u.samples = append(u.samples, sec/float64(len(u.runs)))
	}
	e.clearPassEvents()
	return nil
}

// runShare is the share of xs (calls per pass) that are not 0.
func runShare(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	n := 0
	for _, x := range xs {
		if x > 0 {
			n++
		}
	}
	return float64(n) / float64(len(xs))
}

// mean is the average of xs (0 when empty).
func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// measureH2D times copies of a few sizes up to the largest unit from its
// host block into the staging block: the planner's size→time curve.
func (e *engine) measureH2D() (H2DCurve, error) {
	var big *unit
	for _, u := range e.units {
		if big == nil || u.bytes > big.bytes {
			big = u
		}
	}
	var pts []H2DPoint
	sizes := []int64{1 << 16, 1 << 20, 8 << 20, 64 << 20, big.bytes}
	for _, n := range sizes {
		if n > big.bytes || (len(pts) > 0 && n <= pts[len(pts)-1].Bytes) {
			continue
		}
		best := -1.0
		for rep := 0; rep < 3; rep++ {
			a, err := e.copy.Record()
			if err != nil {
				return H2DCurve{}, err
			}
			if err := e.copy.CopyH2D(e.staging, 0, big.host, 0, n); err != nil {
				return H2DCurve{}, err
			}
			b, err := e.copy.Record()
			if err != nil {
				return H2DCurve{}, err
			}
			if err := b.Synchronize(); err != nil {
				return H2DCurve{}, err
			}
			d, err := b.ElapsedSince(a)
			if err != nil {
				return H2DCurve{}, err
			}
			if s := max(d.Seconds(), 1e-9); best < 0 || s < best {
				best = s
			}
		}
		pts = append(pts, H2DPoint{Bytes: n, Seconds: best})
	}
	// Keep the curve monotone: timer noise on tiny copies can invert it.
	for i := 1; i < len(pts); i++ {
		pts[i].Seconds = max(pts[i].Seconds, pts[i-1].Seconds)
	}
	return H2DCurve{Points: pts}, nil
}

// startInference measures the copy curve, plans, places resident units and
// allocates the transfer slots.
func (e *engine) startInference() error {
	curve, err := e.measureH2D()
	if err != nil {
		return fmt.Errorf("measuring host-to-device copies: %w", err)
	}
	e.curve = curve
	in := PlanInput{FixedBytes: e.fixedBytes, Slots: e.cfg.TransferBlocks, Curve: curve, TransferScale: e.cfg.TransferBudgetScale}
	e.tok.start(&in)
	e.markAnnounced()
	for _, u := range e.units {
		pu := PlanUnit{Name: u.name, Bytes: u.bytes, ComputeSec: median(u.samples), CopyBytes: e.copyBytes(u)}
		if u.announced {
			u.freq = mean(u.calls)
			pu.Announced, pu.Calls, pu.RunShare = true, u.freq, runShare(u.calls)
		}
		in.Units = append(in.Units, pu)
	}
	in.MaxAnnounced = e.maxAnnounced
	if err := e.hostInputs(&in, true); err != nil {
		return err
	}
	room, known, err := e.deviceRoom(e.ownDeviceBytes())
	if err != nil {
		return err
	}
	budget, err := e.budgetBytes()
	if err != nil {
		return err
	}
	if budget == 0 { // no budget and no known capacity: everything may stay
		budget = e.modelDeviceBytes()
	}
	if known {
		if err := e.givenBudgetOverFree(budget, room); err != nil {
			return err
		}
	}
	// A budget that is not a byte count (a fraction, the device's
	// capacity) is cut to the free memory of a device with a limit. On a
	// GPU without one the plan keeps it: cutting it to the card's free
	// memory would leave nothing for the activations allocated after the
	// plan, and it changes what the plan keeps resident (not measured).
	// A fraction given there was checked against the free memory above
	// (what of it the model can use must fit); the default budget (the
	// whole card) is not: a model that fits the card but not its free
	// memory fails when the plan's memory is allocated.
	if known && !room.card && budget > room.free {
		budget = room.free
	}
	in.Budget = budget
	t0 := time.Now()
	plan, err := MakePlan(in)
	if err != nil {
		return err
	}
	e.tracePlanIn("from profiling", plan, in, time.Since(t0))
	e.plan, e.planIn, e.budget = plan, in, budget
	e.budgetMin = e.cfg.GPUBudget.Min && e.cfg.GPUBudget.Bytes > 0
	e.staging.Free()
	e.staging = nil
	if err := e.placeResident(); err != nil {
		return err
	}
	return e.allocSlots()
}

// allocSlots records each unit's placement from the plan, allocates the
// transfer blocks and enters INFERENCE.
func (e *engine) allocSlots() error {
	plan := e.plan
	var streamed []ringUnit
	pooled := 0
	for i, u := range e.units {
		u.resident = plan.Resident[i]
		u.onHost = plan.IsHost(i)
		u.pslot, u.copied, u.pendingCopy = -1, false, nil
		switch {
		case u.resident:
		case u.onHost:
			if e.cfg.HostBackend == nil {
				return fmt.Errorf("offload: the plan computes unit %s on the host but the engine has no host backend (Config.HostBackend)", u.name)
			}
		case u.announced:
			pooled++
			if u.bytes > plan.PoolSlotBytes {
				return fmt.Errorf("offload: streamed unit %s (%d bytes) exceeds its pool slot (%d bytes)", u.name, u.bytes, plan.PoolSlotBytes)
			}
		default:
			u.slot, u.pos = plan.SlotOf[i], len(streamed)
			ru := ringUnit{name: u.name, slot: u.slot, host: u.host, bytes: u.bytes}
			if err := e.packFor(u, plan.SlotBytes, &ru); err != nil {
				return err
			}
			streamed = append(streamed, ru)
		}
	}
	if pooled > 0 && plan.PoolSlots < 1 {
		return fmt.Errorf("offload: the plan streams %d announced units but has no pool slot", pooled)
	}
	if err := e.reallocSlowHost(); err != nil {
		return err
	}
	r, err := newRing(e.dev, e.copy, plan.Slots, plan.SlotBytes, streamed, e.cfg.Unpacker)
	if err != nil {
		return err
	}
	r.timeCopies = e.cfg.OffloadTiming != TimingOff
	e.ring = r
	if pooled > 0 {
		p, err := newPool(e.dev, e.copy, plan.PoolSlots, plan.PoolSlotBytes)
		if err != nil {
			return err
		}
		p.timeCopies, p.policy = r.timeCopies, e.cfg.PoolEviction
		p.prior = float64(max(1, e.cfg.ProfilingIters))
		e.pool = p
	}
	e.phase, e.passes = PhaseInference, 0
	return nil
}

// placeResident copies the plan's resident units to device buffers of their
// own and frees their host blocks.
func (e *engine) placeResident() error {
	for i, u := range e.units {
		if !e.plan.Resident[i] {
			continue
		}
		if err := e.makeResident(u); err != nil {
			return err
		}
	}
	return nil
}

func (e *engine) enterInference(u *unit) error {
	c := e.dev.Compute()
	timed := e.measuring()
	if u.announced {
		if u.resident {
			e.annPass.Calls++
			e.annPass.ResidentCalls++
			u.lastHit = true
		} else if err := e.enterPooled(u, timed); err != nil {
			return err
		}
	} else if !u.resident {
		var onWait func(*copyTiming) error
		if timed {
			onWait = func(ct *copyTiming) error {
				var err error
				u.waitStart, err = c.Record()
				u.copyRec = ct
				return err
			}
		}
		slot, err := e.ring.acquire(u.pos, onWait)
		if err != nil {
			return err
		}
		if err := e.bindTo(u, slot); err != nil {
			return err
		}
		if err := e.ring.enter(); err != nil {
			return err
		}
	}
	if timed {
		var err error
		if u.start, err = c.Record(); err != nil {
			return err
		}
	}
	return nil
}

// exitInference ends u's run in INFERENCE: an event on the compute stream
// marks its end for the timing and for the slot it frees. A resident unit
// outside a measured pass records none: nothing waits on it, and an event
// between two kernels keeps the second from starting under the first
// (dependent launch): a gap at every resident layer's boundary, the likely
// part of the 0.12–0.15 ms a resident FP8 step lost through the engine in
// s26e (2.93 ms against 2.77–2.81 without it; not measured since).
func (e *engine) exitInference(u *unit) error {
	measuring := e.measuring()
	if u.resident && !measuring {
		return nil
	}
	c := e.dev.Compute()
	ev, err := c.Record()
	if err != nil {
		return err
	}
	e.exitEvents++
	if measuring {
		u.end = ev
		e.timing.unitDone(u)
	}
	if u.resident {
		return nil
	}
	if u.announced {
		e.pool.exit(u, ev)
		return nil
	}
	return e.ring.done(u.pos, ev)
}

// memoryUsage is what GetGPUMemoryUsage reports.
func (e *engine) memoryUsage() GPUMemoryUsage {
	var u GPUMemoryUsage
	if e.ring != nil {
		u.TransferBlockBytes = e.ring.bytes()
	}
	if e.pool != nil {
		u.TransferBlockBytes += e.pool.bytes()
	}
	u.ResidentBytes = e.fixedBytes
	u.HostMappedBytes = e.hostMappedBytes()
	for _, x := range e.units {
		if x.dev != nil {
			u.ResidentBytes += x.dev.Size()
		}
	}
	u.TotalBytes = u.TransferBlockBytes + u.ResidentBytes
	return u
}

// release drains the streams, restores the model (preserve) and frees
// everything the engine took.
func (e *engine) release(preserve bool) error {
	var errs []error
	if e.copy != nil {
		if err := e.copy.Synchronize(); e.failed == nil {
			errs = append(errs, err) // a failed engine's stream error was reported already
		}
	}
	errs = append(errs, e.dev.Compute().Synchronize())
	if e.unhook != nil {
		e.unhook()
	}
	e.tree.SetReadObserver(nil)
	if preserve {
		for _, u := range e.units {
			for i, p := range u.params {
				errs = append(errs, p.Bind(u.orig[i]))
			}
		}
		for i, p := range e.fixed {
			errs = append(errs, p.Bind(e.fixedOrig[i]))
		}
	}
	e.freeAll()
	if e.copy != nil {
		if err := e.copy.Close(); e.failed == nil {
			errs = append(errs, err)
		}
		e.copy = nil
	}
	return errors.Join(errs...)
}

// freeAll returns every buffer the engine holds.
func (e *engine) freeAll() {
	for _, u := range e.units {
		u.dropHostViews()
		u.host.Free()
		u.dev.Free()
		u.dropPacked()
		u.host, u.dev = nil, nil
		u.views = map[*runtime.DeviceBuffer][]*runtime.Tensor{}
		u.poolBuf, u.poolViews = nil, nil
	}
	for _, b := range e.fixedBufs {
		b.Free()
	}
	if e.ring != nil {
		e.ring.free()
		e.ring = nil
	}
	if e.pool != nil {
		e.pool.free()
		e.pool = nil
	}
	e.staging.Free()
	e.st.freeStaging()
	e.fixedBufs, e.staging = nil, nil
	e.unquantize() // after the parameters were bound back (release): the Linears get their plain weights
	if e.copy != nil && e.phase == PhaseIdle {
		e.copy.Close()
		e.copy = nil
	}
}
