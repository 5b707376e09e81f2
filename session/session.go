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
// The package compiles with and without the cuda build tag; without it a
// cuda device fails to open with an error wrapping cuda.ErrNotBuilt.
package session

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	flextensor "github.com/flextensor-go/flextensor"
	"github.com/flextensor-go/flextensor/kernels"
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
	// Progress, when set, receives the offload engine's set-up progress.
	Progress func(stage string, done, total int64)
	// Trace, when set, receives each set-up step's duration.
	Trace func(step string, d time.Duration)
	// Manager names the offload manager; empty picks a unique name
	// ("session-N"), which Session.Manager reports.
	Manager string
	// HostOnly loads the weights into host memory and leaves offloading to
	// the caller (offload.Offload(s.Model, ...) under managers of its own,
	// released before Close), e.g. to try several budgets on one loaded
	// model. It excludes GPUBudget and ProfileDir.
	HostOnly bool
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
	// Manager is the offload manager's name, "" when not offloaded.
	Manager string

	host    *runtime.CPUDevice // holds the weights while offloaded
	cleanup []func()
	closed  bool
}

var managerSeq atomic.Int64

// Open loads the checkpoint in dir ("" = the bundled tiny model) onto the
// device named device ("cpu", "cuda", "cuda:N"), offloaded when
// opts.GPUBudget or opts.ProfileDir is given. Errors about opts wrap
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
	if _, _, err := ParseDevice(device); err != nil {
		return nil, err
	}
	trace := opts.Trace
	if trace == nil {
		trace = func(string, time.Duration) {}
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
	t0 = time.Now()
	if s.Device, s.Backend, err = OpenDevice(device, opts.DeviceMemory); err != nil {
		return nil, err
	}
	trace("open device "+device, time.Since(t0))

	if opts.HostOnly {
		s.host = runtime.NewCPU(0)
		if s.Model, s.Checkpoint, err = Load(dir, s.host); err != nil {
			return nil, err
		}
		return s, nil
	}
	if opts.ProfileDir == "" && opts.GPUBudget == "" {
		t0 = time.Now()
		if s.Model, s.Checkpoint, err = Load(dir, s.Device); err != nil {
			return nil, err
		}
		trace("load weights onto "+device, time.Since(t0))
		return s, nil
	}
	name := opts.Manager
	if name == "" {
		name = fmt.Sprintf("session-%d", managerSeq.Add(1))
	}
	cfg := offload.DefaultConfig(s.Device)
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
		st, err := offload.LoadProfile(opts.ProfileDir)
		if err != nil {
			return nil, err
		}
		if s.Model, s.Checkpoint, err = models.LoadFromProfile(dir, st, cfg, name, opts.Strict, compile...); err != nil {
			return nil, err
		}
		s.Manager = name
		return s, nil
	}
	s.host = runtime.NewCPU(0)
	if s.Model, s.Checkpoint, err = Load(dir, s.host); err != nil {
		return nil, err
	}
	cfg.GPUBudget = budget
	cfg.TransferBlocks = opts.TransferBlocks
	cfg.StreamDType = streamDType
	if err := offload.Offload(s.Model, &cfg, name, compile...); err != nil {
		return nil, err
	}
	s.Manager = name
	return s, nil
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
// and the extracted bundled model. It may be called more than once.
func (s *Session) Close() error {
	if s == nil || s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	if s.Manager != "" {
		errs = append(errs, offload.Release(s.Manager, false))
	}
	if s.Model != nil {
		s.Model.Close()
	}
	if s.Checkpoint != nil {
		errs = append(errs, s.Checkpoint.Close())
	}
	if s.host != nil {
		errs = append(errs, s.host.Close())
	}
	if s.Device != nil {
		errs = append(errs, s.Device.Close())
	}
	for _, f := range s.cleanup {
		f()
	}
	return errors.Join(errs...)
}
