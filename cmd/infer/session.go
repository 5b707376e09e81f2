package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	flextensor "github.com/flextensor-go/flextensor"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/models/llama"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/spf13/pflag"
)

// deviceFlags are the flags that choose where a model runs, shared by the
// commands that run one.
type deviceFlags struct {
	model         string
	device        string
	deviceMemory  string
	gpuBudget     string
	blocks        int
	offloadTiming bool
	profile       string
	strict        bool
	unitGraphs    bool
	progress      *progress // nil: no progress output
}

func (d *deviceFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&d.model, "model", "", "checkpoint directory (config.json + safetensors); default: the bundled tiny model")
	fs.StringVar(&d.device, "device", "cpu", "compute device: cpu or cuda:N")
	fs.StringVar(&d.deviceMemory, "device-memory", "", "memory limit of the cpu device (e.g. 2GiB); the offload budget is taken from it")
	fs.StringVar(&d.gpuBudget, "gpu-budget", "", "offload: device memory for weights, as bytes (8GiB) or a fraction of the device (0.25); weights beyond it stream from pinned host memory")
	fs.IntVar(&d.blocks, "transfer-blocks", 0, "offload: number of transfer blocks (0 = the planner chooses)")
	fs.BoolVar(&d.offloadTiming, "offload-timing", false, "offload: print per-unit transfer/compute/wait times after the run")
	fs.StringVar(&d.profile, "profile", "", "offload with the saved profile in this directory (from infer profile): no profiling, each weight read once")
	fs.BoolVar(&d.unitGraphs, "unit-graphs", false, "offload: replay each layer's one-token forward as a CUDA graph of its own (cuda devices)")
	fs.BoolVar(&d.strict, "strict", false, "with --profile: fail when any tensor of the profile is missing from the checkpoint, listing them")
}

// session is a loaded model on its device, offloaded when a budget is given.
type session struct {
	dev     runtime.Device
	host    *runtime.CPUDevice // holds the weights when offloading
	backend kernels.Backend
	model   *llama.Model
	ck      *loader.Checkpoint
	manager string
	dir     string // the checkpoint directory (extracted when bundled)
	cleanup []func()
}

var sessionSeq int

// openSession loads the model; with --gpu-budget it is offloaded by a
// manager named after the session.
func openSession(d deviceFlags) (_ *session, err error) {
	s := &session{}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	var limit int64
	if d.deviceMemory != "" {
		if d.device != "cpu" {
			return nil, usagef("--device-memory applies to --device cpu only")
		}
		b, err := offload.ParseBudget(d.deviceMemory)
		if err != nil || b.Bytes == 0 {
			return nil, usagef("--device-memory %q: want bytes with a unit, such as 2GiB", d.deviceMemory)
		}
		limit = b.Bytes
	}
	var budget offload.Budget
	if d.gpuBudget != "" {
		if budget, err = offload.ParseBudget(d.gpuBudget); err != nil {
			return nil, usageError{fmt.Errorf("--gpu-budget: %w", err)}
		}
	}
	if d.blocks < 0 {
		return nil, usagef("--transfer-blocks %d is negative", d.blocks)
	}
	dir := d.model
	if dir == "" {
		dir2, cleanup, err := flextensor.ExtractTinyLlama()
		if err != nil {
			return nil, err
		}
		s.cleanup = append(s.cleanup, cleanup)
		dir = dir2
	}
	s.dir = dir
	t0 := time.Now()
	if s.dev, s.backend, err = openDevice(d.device, limit); err != nil {
		return nil, err
	}
	traceStep("open device "+d.device, time.Since(t0))
	if d.profile != "" {
		if d.gpuBudget != "" {
			return nil, usagef("--gpu-budget and --profile exclude each other: the profile holds its plan's budget")
		}
		st, err := offload.LoadProfile(d.profile)
		if err != nil {
			return nil, err
		}
		sessionSeq++
		name := fmt.Sprintf("infer-%d", sessionSeq)
		cfg := offload.DefaultConfig(s.dev)
		cfg.Progress = d.progress.update
		cfg.Trace = traceStep
		cfg.Trace = traceStep
		if d.offloadTiming {
			cfg.OffloadTiming = offload.TimingEager
		}
		if s.model, s.ck, err = llama.LoadFromProfile(dir, st, cfg, name, d.strict, s.compileOpts(d)...); err != nil {
			return nil, err
		}
		s.manager = name
		return s, nil
	}
	if d.gpuBudget == "" {
		s.model, s.ck, err = llama.Load(dir, s.dev)
		return s, err
	}
	s.host = runtime.NewCPU(0)
	if s.model, s.ck, err = llama.Load(dir, s.host); err != nil {
		return nil, err
	}
	sessionSeq++
	s.manager = fmt.Sprintf("infer-%d", sessionSeq)
	cfg := offload.DefaultConfig(s.dev)
	cfg.GPUBudget = budget
	cfg.TransferBlocks = d.blocks
	cfg.Progress = d.progress.update
	cfg.Trace = traceStep
	if d.offloadTiming {
		cfg.OffloadTiming = offload.TimingEager
	}
	if err := offload.Offload(s.model, &cfg, s.manager, s.compileOpts(d)...); err != nil {
		s.manager = ""
		return nil, err
	}
	return s, nil
}

// compileOpts is the per-unit compiler the flags ask for.
func (s *session) compileOpts(d deviceFlags) []offload.Option {
	if !d.unitGraphs {
		return nil
	}
	return []offload.Option{offload.WithCompile(offload.GraphCompiler(s.dev.Name(), llama.UnitGraphs(s.backend)))}
}

// printTiming writes the offload timing table (when offloaded).
func (s *session) printTiming(w io.Writer) error {
	if s.manager == "" {
		fmt.Fprintln(w, "offload timing: the model is not offloaded (give --gpu-budget)")
		return nil
	}
	rep, err := offload.CollectOffloadTiming(s.manager)
	if err != nil {
		return err
	}
	fmt.Fprint(w, offload.FormatOffloadTimingTable(rep))
	return nil
}

// Close releases the manager, the model, the checkpoint and the devices.
func (s *session) Close() error {
	var errs []error
	if s.manager != "" {
		errs = append(errs, offload.Release(s.manager, false))
		s.manager = ""
	}
	if s.model != nil {
		s.model.Close()
	}
	if s.ck != nil {
		errs = append(errs, s.ck.Close())
	}
	if s.host != nil {
		errs = append(errs, s.host.Close())
	}
	if s.dev != nil {
		errs = append(errs, s.dev.Close())
	}
	for _, f := range s.cleanup {
		f()
	}
	return errors.Join(errs...)
}

// traceStep prints a set-up step's duration to stderr when FT_TRACE=1.
func traceStep(step string, d time.Duration) {
	if os.Getenv("FT_TRACE") == "1" {
		fmt.Fprintf(os.Stderr, "trace: %-36s %9.1f ms\n", step, float64(d.Microseconds())/1e3)
	}
}
