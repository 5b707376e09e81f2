package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	flextensor "github.com/flextensor-go/flextensor"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
	ftsession "github.com/flextensor-go/flextensor/session"
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
	streamDType   string
	streamCodec   string      // --stream-codec: none or exp4
	hostThreads   hostThreads // --host-threads: host placement
	kvCache       string      // --kv-cache: the paged KV cache's memory (run-model --batch-file, bench --batch)
	progress      *progress   // nil: no progress output
}

func (d *deviceFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&d.model, "model", "", "checkpoint directory (config.json + safetensors), or ORG/NAME[@REV] in the Hugging Face cache (see 'infer pull'); default: the bundled tiny model")
	fs.StringVar(&d.device, "device", "cpu", "compute device: cpu or cuda:N; a list (cuda:0,cuda:1 or cuda:all; cpu:0,cpu:1 on the CPU) cuts the model over those devices (tensor parallelism: each streams and holds only its share)")
	fs.StringVar(&d.deviceMemory, "device-memory", "", "memory limit of the cpu device (e.g. 2GiB); the offload budget is taken from it")
	fs.StringVar(&d.gpuBudget, "gpu-budget", "", "offload: device memory for weights, as bytes (8GiB) or a fraction of the device (0.25); weights beyond it stream from pinned host memory; with several devices, the budget of each device for its shard")
	fs.IntVar(&d.blocks, "transfer-blocks", 0, "offload: number of transfer blocks (0 = the planner chooses)")
	fs.BoolVar(&d.offloadTiming, "offload-timing", false, "offload: print per-unit transfer/compute/wait times after the run")
	fs.StringVar(&d.profile, "profile", "", "offload with the saved profile in this directory (from infer profile): no profiling, each weight read once")
	fs.BoolVar(&d.unitGraphs, "unit-graphs", false, "offload: replay each layer's one-token forward as a CUDA graph of its own (cuda devices)")
	fs.StringVar(&d.streamDType, "stream-dtype", "auto", "offload: dtype of the offloaded layers' weights: auto (as loaded) or fp8 (BF16 weights quantized per output channel to E4M3 when packed: half the bytes streamed; lossy)")
	fs.StringVar(&d.streamCodec, "stream-codec", "none", "offload: how streamed layers cross the link: none (as they are) or exp4 (16-bit weights packed in 12 bits when packed, unpacked on the device: 0.75 of the bytes, lossless); with --profile the profile's codec")
	fs.BoolVar(&d.strict, "strict", false, "with --profile: fail when any tensor of the profile is missing from the checkpoint, listing them")
	registerHostThreads(fs, &d.hostThreads)
	fs.StringVar(&d.kvCache, "kv-cache", "", "batched runs (run-model --batch-file, bench --batch, serve): device memory for the paged KV cache, as bytes (2GiB) or a fraction of the device (0.2), apart from --gpu-budget's weights (default: room for every request, or every sequence of the batch, at once)")
}

// session is a library session (package session) with the CLI's printing.
type session struct {
	*ftsession.Session
	bundled bool   // Dir is the bundled model, extracted into a temporary directory
	cleanup func() // removes that directory
}

// bundledName is how messages name the bundled model instead of the
// temporary directory it is extracted into.
const bundledName = "the bundled tiny model"

// Close releases the session, then removes the extracted bundled model.
func (s *session) Close() error {
	err := s.Session.Close()
	if s.cleanup != nil {
		s.cleanup()
		s.cleanup = nil
	}
	return err
}

// describe names a file of the model directory for messages.
func (s *session) describe(file string) string {
	if s.bundled {
		return bundledName + "'s " + file
	}
	return filepath.Join(s.Dir, file)
}

// name is the model directory for messages.
func (s *session) name() string {
	if s.bundled {
		return bundledName
	}
	return s.Dir
}

// rewriteBundled is err with the temporary directory of the bundled model
// named as the bundled model; err as it is for any other model.
func (s *session) rewriteBundled(err error) error {
	if !s.bundled {
		return err
	}
	return bundledError(err, s.Dir)
}

// bundledError rewrites the temporary directory of the bundled model in
// err's text as the bundled model's name.
func bundledError(err error, dir string) error {
	if err == nil || dir == "" || !strings.Contains(err.Error(), dir) {
		return err
	}
	return rewrittenError{err, strings.ReplaceAll(err.Error(), dir, bundledName)}
}

// rewrittenError is err with another text, still matching errors.Is/As.
type rewrittenError struct {
	err  error
	text string
}

func (r rewrittenError) Error() string { return r.text }
func (r rewrittenError) Unwrap() error { return r.err }

// sessionOptions turns the device flags into the library's options,
// reporting bad flags as usage errors named after the flags.
func (d deviceFlags) sessionOptions() (ftsession.Options, error) {
	opts := ftsession.Options{
		GPUBudget:      d.gpuBudget,
		TransferBlocks: d.blocks,
		OffloadTiming:  d.offloadTiming,
		ProfileDir:     d.profile,
		Strict:         d.strict,
		UnitGraphs:     d.unitGraphs,
		StreamDType:    d.streamDType,
		StreamExp4:     d.streamCodec == "exp4",
		Progress:       d.progress.update,
		Trace:          traceStep,
		Warn:           func(msg string) { fmt.Fprintf(os.Stderr, "warning: %s\n", msg) },
		Context:        cmdCtx,
	}
	if d.device != "cuda:all" {
		if _, err := ftsession.ParseDevices(d.device); err != nil {
			if errors.Is(err, ftsession.ErrUnknownDevice) {
				return opts, usagef("--device %q: unknown device (want cpu, cuda:N, or a list such as cuda:0,cuda:1, cuda:all or cpu:0,cpu:1)", d.device)
			}
			return opts, usageError{fmt.Errorf("--device: %w", err)}
		}
	}
	cpuDevice := d.device == "cpu" || strings.HasPrefix(d.device, "cpu:")
	if d.deviceMemory != "" {
		if !cpuDevice {
			return opts, usagef("--device-memory applies to --device cpu only (each CPU device of a list: cpu:0,cpu:1)")
		}
		b, err := offload.ParseBudget(d.deviceMemory)
		if err != nil || b.Bytes == 0 {
			return opts, usagef("--device-memory %q: want bytes with a unit, such as 2GiB", d.deviceMemory)
		}
		opts.DeviceMemory = b.Bytes
	}
	if d.gpuBudget != "" {
		b, err := offload.ParseBudget(d.gpuBudget)
		if err != nil {
			return opts, usageError{fmt.Errorf("--gpu-budget: %w", err)}
		}
		if b.Fraction > 0 && cpuDevice && d.deviceMemory == "" {
			return opts, usagef("--gpu-budget %s is a fraction of the device, and the cpu device has no size: give --device-memory (e.g. 2GiB) or a budget in bytes (512MiB)", d.gpuBudget)
		}
	}
	if d.blocks < 0 {
		return opts, usagef("--transfer-blocks %d is negative", d.blocks)
	}
	if d.profile != "" && d.gpuBudget != "" {
		return opts, usagef("--gpu-budget and --profile exclude each other: the profile holds its plan's budget")
	}
	if d.strict && d.profile == "" {
		return opts, usagef("--strict applies with --profile only")
	}
	d.hostThreads.apply(&opts)
	if d.hostThreads.set && strings.Contains(d.device, ",") {
		return opts, usagef("--host-threads does not apply to several devices (--device %s): host placement runs one device's plan", d.device)
	}
	switch d.streamCodec {
	case "none", "exp4":
	default:
		return opts, usagef("--stream-codec %q: want none or exp4", d.streamCodec)
	}
	if d.streamCodec == "exp4" && d.streamDType != "auto" && d.streamDType != "" {
		return opts, usagef("--stream-codec exp4 packs 16-bit weights; not with --stream-dtype %s", d.streamDType)
	}
	if sd, err := offload.ParseStreamDType(d.streamDType); err != nil {
		return opts, usagef("--stream-dtype %q: want auto or fp8", d.streamDType)
	} else if sd != runtime.Invalid && d.profile != "" {
		return opts, usagef("--stream-dtype %s does not apply with --profile (the weights are read straight from the checkpoint)", d.streamDType)
	}
	return opts, nil
}

// checkOffloadFlags refuses the offload flags that would do nothing without
// an offloaded model (--gpu-budget or --profile): run-model and profile.
func (d deviceFlags) checkOffloadFlags() error {
	if d.gpuBudget != "" || d.blocks < 0 {
		return nil // sessionOptions reports a negative --transfer-blocks
	}
	for _, f := range []struct {
		name string
		set  bool
	}{{"--transfer-blocks", d.blocks != 0}, {"--unit-graphs", d.unitGraphs}, {"--offload-timing", d.offloadTiming}, {"--host-threads", d.hostThreads.set}} {
		if !f.set {
			continue
		}
		if d.profile != "" && f.name != "--transfer-blocks" {
			continue // a profile offloads too
		}
		if d.profile != "" {
			return usagef("--transfer-blocks does not apply with --profile: the profile holds its plan's transfer blocks")
		}
		return usagef("%s applies to an offloaded model only: give --gpu-budget (or --profile)", f.name)
	}
	return nil
}

// openSession loads the model (--model, default the bundled one) on
// --device, offloaded with --gpu-budget or --profile.
func openSession(d deviceFlags) (*session, error) {
	opts, err := d.sessionOptions()
	if err != nil {
		return nil, err
	}
	if err := stallForTest("open", os.Stderr); err != nil {
		return nil, err
	}
	return openSessionWith(d, opts)
}

// openSessionWith opens --model on --device with opts (from sessionOptions,
// perhaps changed).
func openSessionWith(d deviceFlags, opts ftsession.Options) (*session, error) {
	dir, bundled, cleanup := d.model, false, func() {}
	if dir == "" {
		x, c, err := flextensor.ExtractTinyLlama()
		if err != nil {
			return nil, err
		}
		dir, bundled, cleanup = x, true, c
		stallForTest("load", os.Stderr)
	}
	s, err := ftsession.Open(dir, d.device, opts)
	if err != nil {
		cleanup()
		if !bundled {
			dir = ""
		}
		if errors.Is(err, ftsession.ErrBadOptions) {
			return nil, usageError{bundledError(err, dir)}
		}
		return nil, bundledError(err, dir)
	}
	return &session{Session: s, bundled: bundled, cleanup: cleanup}, nil
}

// printTiming writes the offload timing table (when offloaded).
func (s *session) printTiming(w io.Writer) error {
	if s.Manager == "" {
		fmt.Fprintln(w, "offload timing: the model is not offloaded (give --gpu-budget)")
		return nil
	}
	rep, err := offload.CollectOffloadTiming(s.Manager)
	if err != nil {
		return err
	}
	if note := noTimingNote(offload.GetOffloadManager(s.Manager)); rep == nil && note != "" {
		fmt.Fprint(w, note)
		return nil
	}
	fmt.Fprint(w, offload.FormatOffloadTimingTable(rep))
	return nil
}

// poolStats is the expert cache's counts since INFERENCE began (zero when
// the model is not offloaded or has no data-dependent units).
func (s *session) poolStats() offload.PoolStats {
	if s.Manager == "" {
		return offload.PoolStats{}
	}
	return offload.GetOffloadManager(s.Manager).PoolStats()
}

// formatPoolStats is the one-line summary of the expert cache.
func formatPoolStats(st offload.PoolStats) string {
	return fmt.Sprintf("expert cache: hit rate %.1f%% over %d calls in %d forwards (%d resident, %d in a pool slot, %d copied); %s copied, %s per forward",
		100*st.HitRate(), st.Calls, st.Passes, st.ResidentCalls, st.Hits, st.Misses,
		runtime.FormatBytes(st.CopiedBytes), runtime.FormatBytes(st.CopiedBytes/int64(max(st.Passes, 1))))
}

// traceStep prints a set-up step's duration to stderr when FT_TRACE=1, with
// the time since the process started at its end.
func traceStep(step string, d time.Duration) {
	if os.Getenv("FT_TRACE") == "1" {
		fmt.Fprintf(os.Stderr, "trace: %-36s %9.1f ms (at %.1f ms)\n", step, float64(d.Microseconds())/1e3,
			float64(time.Since(processStart).Microseconds())/1e3)
	}
}
