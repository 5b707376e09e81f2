// Package session turns a checkpoint directory and a device name into a
// model ready to run: it opens the device ("cpu", "cuda:N") and its kernels,
// loads the checkpoint, offloads it under a GPU budget or a saved profile when
// asked, and releases all of it in Close. It is what cmd/infer runs on, and
// the one call a library user needs:
//
//	s, err := session.Open(dir, "cuda:0", session.Options{GPUBudget: "8GiB"})
//	if err != nil {
//		return err
//	}
//	defer s.Close()
//	ids, err := s.Model.Generate(s.Backend, prompt, decoder.GenerateOptions{MaxNewTokens: 32})
//
// A session's model may be shared by goroutines: it runs one forward at a
// time (decoder.Model); models/generate.Scheduler serves many requests in
// one batched forward. KV caches made on the model (NewKVCache,
// NewPagedCache) are the caller's to free before Close.
//
// The package compiles with and without the cuda build tag; without it a
// cuda device fails to open with an error wrapping cuda.ErrNotBuilt.
package session

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	flextensor "github.com/flextensor-go/flextensor"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/kernels/host"
	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/loader/hub"
	"github.com/flextensor-go/flextensor/models"
	_ "github.com/flextensor-go/flextensor/models/all" // registers every family
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// Options say how Open loads and places the model. The zero value loads it
// whole onto the device.
type Options struct {
	// DeviceMemory caps the cpu device's memory in bytes (0 = no cap); a
	// fractional GPUBudget on the cpu device is taken of it. It must be 0 for
	// a GPU.
	DeviceMemory int64
	// GPUBudget, when not empty, offloads the model: device memory for
	// weights as bytes ("8GiB") or a fraction of the device ("0.25", of the
	// device's memory limit, or of a GPU's memory when it has none); weights
	// beyond it stream from pinned host memory. See offload.ParseBudget.
	// "0" streams every layer: the budget is the smallest that works, the
	// non-layer weights and TransferBlocks (default 2) transfer slots, the
	// same meaning as in infer bench and infer inspect. A fraction on a
	// device of unknown size (a cpu device without DeviceMemory) is an
	// error before anything is loaded. A budget is a cap: one above the
	// model's size keeps it all on the device. Open refuses a budget that
	// cannot work, before the first forward: below the least plan the
	// planner can make (the non-layer weights and one transfer block of
	// the largest layer, or TransferBlocks blocks sized so that larger
	// layers stay resident, whichever the planner can do least, plus a
	// pool slot for an expert) with an error wrapping offload.ErrBudget;
	// a budget or least plan over the device's free memory with an error
	// wrapping runtime.ErrOutOfMemory (on a GPU without a memory limit a
	// budget, in bytes or a fraction, is checked for what of it the model
	// can use). Both can be matched with errors.Is.
	GPUBudget string
	// TransferBlocks is the number of offload transfer slots (0 = the
	// planner chooses).
	TransferBlocks int
	// OffloadTiming records per-unit transfer/compute/wait times
	// (offload.CollectOffloadTiming on Session.Manager).
	OffloadTiming bool
	// ProfileDir offloads with the profile saved there (offload.SaveProfile):
	// no profiling, each weight read once. It excludes GPUBudget: the
	// profile holds its plan's budget.
	ProfileDir string
	// Strict, with ProfileDir, fails when a tensor of the profile is missing
	// from the checkpoint.
	Strict bool
	// UnitGraphs replays each offloaded layer's one-token forward as a CUDA
	// graph of its own (GPU backends that can capture).
	UnitGraphs bool
	// StreamDType, with GPUBudget, is the dtype the offloaded layers'
	// Linear weights are streamed and multiplied in: "" or "auto" as
	// loaded, "fp8" quantized per output channel to E4M3 when offloaded
	// (half the bytes; lossy; offload.Config.StreamDType). Not with
	// ProfileDir.
	StreamDType string
	// StreamExp4, with GPUBudget, sends the streamed layers exp4-packed
	// (16-bit weights in 12 bits, lossless: 0.75 of the bytes over the
	// link) and unpacks them on the device (offload.Config.StreamExp4); the
	// device's backend must unpack them (kernels.Exp4Unpacker: CUDA and CPU
	// do). With ProfileDir the profile says (offload.State.StreamCodec):
	// StreamExp4 then only asks that it was made with exp4 streaming.
	StreamExp4 bool
	// Progress, when set, receives the offload engine's set-up progress.
	Progress func(stage string, done, total int64)
	// Trace, when set, receives each set-up step's duration.
	Trace func(step string, d time.Duration)
	// Warn, when set, receives what the user should know but is not an
	// error: with ProfileDir and not Strict, the tensors of the profile the
	// checkpoint lacks (they run as zeros, the seed's strict=False).
	Warn func(msg string)
	// Manager names the offload manager; empty picks a unique name
	// ("session-N"), which Session.Manager reports. A name that already
	// offloads another model is refused (offload.ErrNameInUse).
	Manager string
	// Context, when set, stops Open between its steps (extracting the
	// bundled model, opening the device, loading, offloading) once it is
	// done: Open then releases what it made and returns an error wrapping
	// the context's error. A single step (one weight upload, one profiling
	// forward) is not cut short; a caller that must stop at once exits the
	// process, whose memory the operating system and the GPU driver reclaim.
	Context context.Context
	// HostOnly loads the weights into host memory and leaves offloading to
	// the caller (offload.Offload(s.Model, ...) under managers of its own,
	// released before Close), e.g. to try several budgets on one loaded
	// model. It excludes GPUBudget and ProfileDir.
	HostOnly bool
	// HostPlacement, with GPUBudget or ProfileDir (or HostOnly, for a
	// caller that offloads itself), lets the offload planner compute layers
	// on the host CPU: Open makes a CPU device and the host kernels
	// (kernels/host) with HostThreads workers and sets them as the offload
	// engine's Config.HostBackend (Session.HostBackend). Forwards of one
	// sequence (Forward, Generate) and batched ones (ForwardBatch, and so
	// the scheduler) compute host layers. Not with several devices.
	HostPlacement bool
	// HostThreads is the host kernels' worker count with HostPlacement (0 =
	// every core); negative is an error.
	HostThreads int
}

// Session is a loaded model on its device. Its fields are read-only; Close
// releases everything.
type Session struct {
	// Device is the compute device; Backend runs the kernels on it.
	Device  runtime.Device
	Backend kernels.Backend
	// Model is the loaded model; Checkpoint its open weights files.
	Model      *decoder.Model
	Checkpoint *loader.Checkpoint
	// Dir is the checkpoint directory (a temporary one holding the bundled
	// model when Open was given "").
	Dir string
	// Manager is the offload manager's name, "" when not offloaded (rank
	// 0's on several devices).
	Manager string
	// Devices, Backends and Managers are every device's, rank 0 (Device,
	// Backend, Manager) first, when the model is sharded over several
	// devices (Open with a device list): Model is then rank 0's shard,
	// which runs them all (decoder.Group). Nil otherwise.
	Devices  []runtime.Device
	Backends []kernels.Backend
	Managers []string

	// HostBackend computes the layers the offload plan places on the host
	// (Options.HostPlacement); nil otherwise.
	HostBackend kernels.Backend

	host    *runtime.CPUDevice // holds the weights while offloaded
	hostDev *runtime.CPUDevice // HostBackend's device
	cleanup []func()
	closeMu sync.Mutex // serialises Close
	closed  bool
}

var managerSeq atomic.Int64

// Open loads the checkpoint in dir ("" = the bundled tiny model) onto the
// device named device ("cpu", "cuda", "cuda:N"), offloaded when
// opts.GPUBudget or opts.ProfileDir is given. A device list
// ("cuda:0,cuda:1", "cuda:all", "cpu:0,cpu:1"; ParseDevices) cuts the model
// over those devices (tensor parallelism, decoder.Group), each shard
// offloaded under GPUBudget on its own device (the budget is per device). Errors about opts wrap
// ErrBadOptions; an unknown device name wraps ErrUnknownDevice.
func Open(dir, device string, opts Options) (_ *Session, err error) {
	var budget offload.Budget
	if opts.GPUBudget != "" {
		if budget, err = offload.ParseBudget(opts.GPUBudget); err != nil {
			return nil, fmt.Errorf("gpu budget: %w: %w", err, ErrBadOptions)
		}
	}
	if opts.TransferBlocks < 0 {
		return nil, fmt.Errorf("transfer blocks %d is negative: %w", opts.TransferBlocks, ErrBadOptions)
	}
	if opts.ProfileDir != "" && opts.GPUBudget != "" {
		return nil, fmt.Errorf("a GPU budget and a profile exclude each other (the profile holds its plan's budget): %w", ErrBadOptions)
	}
	if opts.HostOnly && (opts.GPUBudget != "" || opts.ProfileDir != "") {
		return nil, fmt.Errorf("host only excludes a GPU budget and a profile: %w", ErrBadOptions)
	}
	if opts.Strict && opts.ProfileDir == "" {
		return nil, fmt.Errorf("strict applies to loading from a profile only: %w", ErrBadOptions)
	}
	streamDType, err := offload.ParseStreamDType(opts.StreamDType)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", err, ErrBadOptions)
	}
	if streamDType != runtime.Invalid && opts.GPUBudget == "" && !opts.HostOnly {
		return nil, fmt.Errorf("stream dtype %s applies to offloaded models (give a GPU budget; loading from a profile does not support it): %w", opts.StreamDType, ErrBadOptions)
	}
	if opts.HostThreads < 0 {
		return nil, fmt.Errorf("host threads %d is negative (0 = every core): %w", opts.HostThreads, ErrBadOptions)
	}
	if opts.HostThreads != 0 && !opts.HostPlacement {
		return nil, fmt.Errorf("host threads apply with host placement only: %w", ErrBadOptions)
	}
	if opts.HostPlacement && opts.GPUBudget == "" && opts.ProfileDir == "" && !opts.HostOnly {
		return nil, fmt.Errorf("host placement computes offloaded layers on the host: give a GPU budget or a profile: %w", ErrBadOptions)
	}
	names, err := ParseDevices(device)
	if err != nil {
		return nil, err
	}
	if opts.HostPlacement && len(names) > 1 {
		return nil, fmt.Errorf("host placement is not implemented for a model sharded over %d devices (give one device): %w", len(names), ErrBadOptions)
	}
	if len(names) == 1 { // "cuda:all" on a machine of one GPU
		device = names[0]
	}
	trace := opts.Trace
	if trace == nil {
		trace = func(string, time.Duration) {}
	}
	ctx := opts.Context
	if ctx == nil {
		ctx = context.Background()
	}
	stopped := func() error {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("session: stopped while opening: %w", err)
		}
		return nil
	}
	if err := stopped(); err != nil {
		return nil, err
	}
	s := &Session{}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	t0 := time.Now()
	if dir == "" {
		x, cleanup, err := flextensor.ExtractTinyLlama()
		if err != nil {
			return nil, err
		}
		s.cleanup = append(s.cleanup, cleanup)
		dir = x
	} else if dir, err = hub.Resolve(dir); err != nil {
		return nil, err
	}
	s.Dir = dir
	trace("find checkpoint", time.Since(t0))
	if err := stopped(); err != nil {
		return nil, err
	}
	if len(names) > 1 {
		if err := s.openSharded(dir, names, opts, budget, streamDType, trace, stopped); err != nil {
			return nil, err
		}
		return s, nil
	}
	t0 = time.Now()
	if s.Device, s.Backend, err = OpenDevice(device, opts.DeviceMemory); err != nil {
		return nil, err
	}
	trace("open device "+device, time.Since(t0))
	if err := stopped(); err != nil {
		return nil, err
	}
	if err := checkFractionBudget(budget, s.Device); err != nil {
		return nil, err
	}

	if opts.HostPlacement {
		if err := s.openHost(opts.HostThreads); err != nil {
			return nil, err
		}
	}
	if opts.HostOnly {
		s.host = runtime.NewCPU(0)
		if s.Model, s.Checkpoint, err = Load(dir, s.host); err != nil {
			return nil, err
		}
		return s, stopped()
	}
	if opts.ProfileDir == "" && opts.GPUBudget == "" {
		t0 = time.Now()
		if s.Model, s.Checkpoint, err = Load(dir, s.Device); err != nil {
			return nil, err
		}
		trace("load weights onto "+device, time.Since(t0))
		return s, stopped()
	}
	name := opts.Manager
	if name == "" {
		name = fmt.Sprintf("session-%d", managerSeq.Add(1))
	}
	cfg := offload.DefaultConfig(s.Device)
	cfg.HostBackend = s.HostBackend
	var st *offload.State
	exp4 := opts.StreamExp4
	if opts.ProfileDir != "" {
		// The profile says how its plan's streamed units travel.
		if st, err = offload.ReadProfile(opts.ProfileDir); err != nil {
			return nil, err
		}
		if opts.StreamExp4 && st.StreamCodec != offload.StreamCodecExp4 {
			return nil, fmt.Errorf("the profile in %s streams its layers as they are; exp4 streaming needs a profile made with it (infer profile --stream-codec exp4): %w",
				opts.ProfileDir, ErrBadOptions)
		}
		exp4 = st.StreamCodec == offload.StreamCodecExp4
	}
	if err := StreamExp4Config(&cfg, exp4, s.Backend); err != nil {
		return nil, err
	}
	cfg.Progress = opts.Progress
	cfg.Trace = opts.Trace
	if opts.OffloadTiming {
		cfg.OffloadTiming = offload.TimingEager
	}
	var compile []offload.Option
	if opts.UnitGraphs {
		compile = s.UnitGraphOptions()
	}
	if opts.ProfileDir != "" {
		if s.Model, s.Checkpoint, err = models.LoadFromProfile(dir, st, cfg, name, opts.Strict, compile...); err != nil {
			return nil, err
		}
		s.Manager = name
		if _, missing := offload.FillMissing(s.Checkpoint, st); len(missing) > 0 && opts.Warn != nil {
			list := missing
			if len(list) > 8 {
				list = append(list[:8:8], fmt.Sprintf("and %d more", len(missing)-8))
			}
			opts.Warn(fmt.Sprintf("checkpoint %s lacks %d tensors of the profile; they run as zeros (strict refuses this): %s",
				dir, len(missing), strings.Join(list, ", ")))
		}
		return s, stopped()
	}
	s.host = runtime.NewCPU(0)
	if s.Model, s.Checkpoint, err = Load(dir, s.host); err != nil {
		return nil, err
	}
	if err := stopped(); err != nil {
		return nil, err
	}
	if budget.Bytes == 0 && budget.Fraction == 0 { // "0": stream everything
		fp, err := offload.Measure(s.Model, cfg.Include, cfg.Exclude)
		if err != nil {
			return nil, err
		}
		if opts.TransferBlocks == 0 {
			opts.TransferBlocks = 2
		}
		budget = fp.Min(opts.TransferBlocks)
	}
	cfg.GPUBudget = budget
	cfg.TransferBlocks = opts.TransferBlocks
	cfg.StreamDType = streamDType
	if err := offload.Offload(s.Model, &cfg, name, compile...); err != nil {
		return nil, err
	}
	s.Manager = name
	return s, stopped()
}

// StreamExp4Config sets cfg to stream exp4-packed with b unpacking when on
// (Options.StreamExp4); b must be an Exp4Unpacker.
func StreamExp4Config(cfg *offload.Config, on bool, b kernels.Backend) error {
	if !on {
		return nil
	}
	u, ok := b.(kernels.Exp4Unpacker)
	if !ok {
		return fmt.Errorf("exp4 streaming: the %s backend cannot unpack (kernels.Exp4Unpacker): %w", b.Device().Name(), ErrBadOptions)
	}
	cfg.StreamExp4, cfg.Unpacker = true, u
	return nil
}

// openHost makes the host placement's CPU device and its host kernels with
// threads workers (0 = every core).
func (s *Session) openHost(threads int) error {
	s.hostDev = runtime.NewCPUNamed("host", 0)
	hb, err := host.New(s.hostDev, host.Options{Threads: threads})
	if err != nil {
		return fmt.Errorf("host placement: %w", err)
	}
	s.HostBackend = hb
	return nil
}

// checkFractionBudget refuses a fractional budget on a device whose size is
// unknown (a cpu device without a memory limit) before anything is loaded.
func checkFractionBudget(b offload.Budget, dev runtime.Device) error {
	if b.Fraction > 0 && offload.DeviceCapacity(dev) <= 0 {
		return fmt.Errorf("a GPU budget of %g is a fraction of the device, but %s has no memory limit to take it of (set a device memory limit, or give bytes such as 512MiB): %w",
			b.Fraction, dev.Name(), ErrBadOptions)
	}
	return nil
}

// Load reads the checkpoint in dir onto dev (weights on a cpu device are
// mapped, not copied): the one place this package loads a model. The caller
// closes both.
func Load(dir string, dev runtime.Device) (*decoder.Model, *loader.Checkpoint, error) {
	return models.Load(dir, dev)
}

// UnitGraphOptions are the offload options that replay each offloaded layer's
// one-token forward as a CUDA graph of its own on this session's backend.
func (s *Session) UnitGraphOptions() []offload.Option {
	return []offload.Option{offload.WithCompile(offload.GraphCompiler(s.Device.Name(), decoder.UnitGraphs(s.Backend)))}
}

// Close releases the offload manager, the model, the checkpoint, the devices
// and the extracted bundled model. It may be called more than once, and
// from any goroutine, also while another runs the model: it first stops
// the model (decoder.Model.Stop), which waits for the forward in progress
// and makes every later entry point (Generate, Forward, ForwardBatch,
// NewKVCache, NewPagedCache, a DecodeGraph's step) return an error
// wrapping decoder.ErrClosed; a Generate running meanwhile returns its
// tokens so far with that error. KV caches the caller made on the model
// (decoder.Model.NewKVCache, NewPagedCache, and so a
// generate.Scheduler's) must be freed (KVCache.Free, kvcache.Paged.Close)
// before Close, which otherwise returns an error naming the device memory
// still held. It must not be called from inside a forward (an offload
// hook); a Generate's OnToken may call it.
func (s *Session) Close() error {
	if s == nil {
		return nil
	}
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.Model != nil {
		s.Model.Stop() // no forward runs past this; the offload engine is free to go
	}
	var errs []error
	if len(s.Managers) > 0 {
		for _, name := range s.Managers {
			errs = append(errs, offload.Release(name, false))
		}
	} else if s.Manager != "" {
		errs = append(errs, offload.Release(s.Manager, false))
	}
	if s.Model != nil {
		s.Model.Close()
	}
	if s.Checkpoint != nil {
		errs = append(errs, s.Checkpoint.Close())
	}
	if hb, ok := s.HostBackend.(interface{ Close() error }); ok {
		errs = append(errs, hb.Close())
	}
	if s.hostDev != nil {
		errs = append(errs, s.hostDev.Close())
	}
	if s.host != nil {
		errs = append(errs, s.host.Close())
	}
	if len(s.Devices) > 0 {
		for _, d := range s.Devices {
			errs = append(errs, d.Close())
		}
	} else if s.Device != nil {
		errs = append(errs, s.Device.Close())
	}
	for _, f := range s.cleanup {
		f()
	}
	return errors.Join(errs...)
}
