package main

import (
	"encoding/json"
	"fmt"
	ftsession "github.com/flextensor-go/flextensor/session"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/llama"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/spf13/pflag"
)

func init() {
	register(command{name: "bench", summary: "time offloaded forwards at several GPU budgets against their floor", run: benchCmd,
		define: func(fs *pflag.FlagSet) { benchFlags(fs) }})
}

const benchUsage = `
infer bench times forward passes of one model under a list of device memory
budgets and prints, for each, the measured forward time next to the plan's
prediction and its floor (max of compute and streamed bytes over the measured
host-to-device bandwidth).

Budgets: bytes (8GiB), a fraction of the device (0.25), "0" (or 0GiB, 0B) for everything
streamed through --transfer-blocks slots (default 2), or "resident" for the
model fully on the device without the offload engine.

With --host-threads N every offloaded budget B gets a second row, "B+host":
the three-way plan, whose planner may compute layers on the host CPU with N
threads while others stream (column host: the host-computed units). With
--batch a forward computes nothing on the host (its sequences' KV caches
are on the device): the +host rows show the plan batches get.

Usage:
  infer bench --model DIR --device cuda:0 --budgets 0,4GiB,8GiB,resident [flags]

Examples:
  infer bench --model /tmp/llama3-8b --device cuda:0 --budgets 0,4GiB,8GiB,12GiB --mode decode --context 512
  infer bench --model /tmp/llama3-8b --device cuda:0 --budgets 0 --mode prefill --tokens 8192
  infer bench --device cpu --device-memory 8MiB --budgets 0,1MiB,resident --iters 5
  infer bench --model /tmp/llama3-8b --device cuda:0 --budgets 0 --batch 1,16,64,256 --context 512
  infer bench --model /tmp/llama3-8b --device cuda:0 --budgets resident --batch 64 --mode prefill --tokens 512
  infer bench --model /tmp/llama3-8b --device cuda:0 --budgets 0,8GiB --host-threads 16 --context 512
`

type benchRow struct {
	Budget        string `json:"budget"`
	BudgetBytes   int64  `json:"budget_bytes"`
	Mode          string `json:"mode"`
	Tokens        int    `json:"tokens"`
	Context       int    `json:"context"`
	ResidentUnits int    `json:"resident_units"`
	StreamedUnits int    `json:"streamed_units"`
	// HostUnits is the units the plan computes on the host CPU (rows of
	// --host-threads, budget "B+host"; 0 for the two-way plan).
	HostUnits      int     `json:"host_units"`
	Slots          int     `json:"transfer_blocks"`
	StreamedBytes  int64   `json:"streamed_bytes"`
	DeviceBytes    int64   `json:"device_bytes"`
	PinnedBytes    int64   `json:"pinned_bytes"`
	H2DGBps        float64 `json:"h2d_gbps"`
	FloorMs        float64 `json:"floor_ms"`
	TransferMs     float64 `json:"transfer_floor_ms"`
	PredictedMs    float64 `json:"predicted_ms"`
	MeasuredMs     float64 `json:"measured_ms"`
	MinMs          float64 `json:"min_ms"`
	MeasuredVsFlr  float64 `json:"measured_over_floor"`
	PredictedError float64 `json:"prediction_error"`
	// GraphMs is a resident decode step replayed as a captured graph, the
	// token picked on the device (what run-model's generation does), where
	// the backend captures graphs; 0 elsewhere.
	GraphMs float64 `json:"graph_ms,omitempty"`
	// GenerateMs is the median time between two greedy tokens of the
	// model's Generate after a prompt of the context's length (what
	// run-model does: on the CUDA backend device-fed replayed steps, one
	// step enqueued ahead of the host), for a resident decode row; 0
	// elsewhere.
	GenerateMs float64 `json:"generate_ms,omitempty"`
	// A model sharded over several devices (--device cuda:0,cuda:1): each
	// device's plan, and the streamed bytes of all of them per measured
	// forward time. The row's streamed and device bytes are the sums, its
	// floor, transfer floor and prediction the slowest device's.
	Devices       []benchDevice `json:"devices,omitempty"`
	AggregateGBps float64       `json:"aggregate_h2d_gbps,omitempty"`

	// HostMappedBytes are weights the device reads from mapped host memory
	// (the token embedding table while offloading; FT_EMBED_HOST=0: 0).
	// pinned_bytes (all page-locked host memory: the streamed units' blocks,
	// host KV, ...) includes them: ~1.05 GB for Llama 3 8B.
	HostMappedBytes int64 `json:"host_mapped_bytes,omitempty"`
}

type benchOptions struct {
	d                            deviceFlags
	budgets, mode                string
	batch                        string // bench --batch: batched decode sizes
	tokens, context, iters, warm int
	jsonOut                      bool
	kernelProfile                bool // --kernel-profile
}

func benchFlags(fs *pflag.FlagSet) *benchOptions {
	var o benchOptions
	o.d.register(fs)
	fs.StringVar(&o.budgets, "budgets", "0,resident", "comma-separated budgets (see above)")
	fs.StringVar(&o.mode, "mode", "decode", "decode (one token at --context) or prefill (--tokens at once)")
	fs.IntVar(&o.tokens, "tokens", 512, "prefill: tokens per forward")
	fs.IntVar(&o.context, "context", 512, "decode: tokens already in the KV cache")
	fs.IntVar(&o.iters, "iters", 10, "measured forwards per budget")
	fs.IntVar(&o.warm, "warmup", 2, "unmeasured forwards after the engine reaches INFERENCE")
	fs.BoolVar(&o.jsonOut, "json", false, "print one JSON object per budget")
	fs.BoolVar(&o.kernelProfile, "kernel-profile", false, "after each resident measurement, time every kernel of one more forward (batched step with --batch) and print the table (CUDA)")
	fs.StringVar(&o.batch, "batch", "", "time batched decode steps of these batch sizes (1,16,64,256) at --context, as tokens/s")
	return &o
}

func benchCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench", benchUsage, stderr)
	o := benchFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if o.batch != "" {
		return benchBatch(o, stdout)
	}
	if o.d.kvCache != "" {
		return usagef("--kv-cache applies to batched runs (run-model --batch-file, bench --batch)")
	}
	d := o.d
	budgets, mode, tokens, context, iters, warm, jsonOut := &o.budgets, &o.mode, &o.tokens, &o.context, &o.iters, &o.warm, &o.jsonOut
	if *mode != "decode" && *mode != "prefill" {
		return usagef("--mode %q: want decode or prefill", *mode)
	}
	if *tokens <= 0 || *context < 0 || *iters <= 0 || *warm < 0 {
		return usagef("--tokens, --iters must be positive; --context, --warmup not negative")
	}
	traceTokens, err := tokenTraceOn()
	if err != nil {
		return err
	}
	list := strings.Split(*budgets, ",")
	if d.gpuBudget != "" || d.profile != "" {
		return usagef("bench takes its budgets from --budgets; --gpu-budget and --profile do not apply")
	}
	if d.offloadTiming {
		return usagef("--offload-timing does not apply to bench: its table is the timing (per-unit tables: infer run-model --gpu-budget X --offload-timing)")
	}
	for _, b := range list {
		if b = strings.TrimSpace(b); b != "resident" {
			if _, err := offload.ParseBudget(b); err != nil {
				return usageError{fmt.Errorf("--budgets: %w", err)}
			}
		}
	}
	opts, err := d.sessionOptions()
	if err != nil {
		return err
	}
	opts.HostOnly = true
	sess, err := openSessionWith(d, opts)
	if err != nil {
		return err
	}
	defer sess.Close()
	backend, model, ck := sess.Backend, sess.Model, sess.Checkpoint
	pre := 2 // discovery (the first forward) and profiling (two) come before INFERENCE
	if *mode == "prefill" {
		pre = 3
	}
	// With host placement, INFERENCE's first decode passes measure the host
	// units (a warm-up, then ProfilingIters passes) and replan once; a
	// replan that moves units makes the next pass start from idle slots
	// (and move KV caches). Those passes are not the plan's steady rate, so
	// the three-way rows skip them too (one more each).
	hostPre := 0
	if sess.HostBackend != nil && *mode == "decode" {
		hostPre = 1 + offload.DefaultConfig(nil).ProfilingIters + 1
	}
	ctxLen := model.Cfg.MaxPositionEmbeddings
	if *mode == "decode" {
		if !fs.Changed("context") {
			*context = min(*context, max(ctxLen-*warm-pre-hostPre-*iters, 0))
		}
		if need := *context + *warm + pre + hostPre + *iters; need > ctxLen {
			return usagef("--context %d + %d forwards (--warmup %d, %d to profile and measure host units, --iters %d) = %d positions exceed the model's context of %d (max_position_embeddings)",
				*context, *warm+pre+hostPre+*iters, *warm, pre+hostPre, *iters, need, ctxLen)
		}
	} else if *tokens > ctxLen {
		return usagef("--tokens %d exceeds the model's context of %d (max_position_embeddings)", *tokens, ctxLen)
	}
	slots := d.blocks
	if slots == 0 {
		slots = 2
	}
	if !*jsonOut {
		fmt.Fprintf(stdout, "%s on %s, %s, %d layers, %s of weights\n", sess.name(), sessDevices(sess), benchShape(*mode, *tokens, *context),
			model.Cfg.NumHiddenLayers, runtime.FormatBytes(ck.TotalBytes()))
		fmt.Fprintf(stdout, "%-12s %5s %5s %5s %5s %9s %8s %10s %10s %10s %8s %8s\n", "budget", "res", "str", "host", "slots",
			"stream GB", "H2D GB/s", "floor ms", "pred ms", "meas ms", "meas/flr", "pred err")
	}
	type benchEntry struct {
		budget string
		host   bool // the three-way plan (--host-threads)
	}
	var entries []benchEntry
	for _, b := range list {
		b = strings.TrimSpace(b)
		entries = append(entries, benchEntry{b, false})
		if sess.HostBackend != nil && b != "resident" {
			entries = append(entries, benchEntry{b, true})
		}
	}
	for i, ent := range entries {
		b := ent.budget
		row := benchRow{Budget: b, Mode: *mode, Tokens: *tokens, Context: *context}
		if ent.host {
			row.Budget = b + "+host"
		}
		if *mode == "decode" {
			row.Tokens = 1
		}
		var times []float64
		shards, devs := benchTargets(sess)
		if b == "resident" {
			m, ck2, err := loadResident(sess)
			if err != nil {
				return fmt.Errorf("budget resident: %w", err)
			}
			var kp *kernelProfiler
			if o.kernelProfile {
				kp = &kernelProfiler{w: stdout, dev: backend.Device()}
			}
			var tt *tokenTracer
			if traceTokens {
				tt = newTokenTracer(stderr, "forward")
			}
			times, err = measureForwards(m, backend, *mode, *tokens, *context, *warm, *iters, uint64(i), kp, tt)
			if err == nil && *mode == "decode" {
				var gt []float64
				if gt, err = measureGraphSteps(m, backend, *context, *iters); err == nil && len(gt) > 0 {
					row.GraphMs = medianOf(gt)
				}
				if err == nil {
					var gen []float64
					if gen, err = measureGenerate(m, backend, *context, *iters); err == nil && len(gen) > 0 {
						row.GenerateMs = medianOf(gen)
					}
				}
			}
			row.DeviceBytes = ck2.TotalBytes()
			m.Close()
			ck2.Close()
			if err != nil {
				return fmt.Errorf("budget resident: %w", err)
			}
			row.ResidentUnits = model.Cfg.NumHiddenLayers
		} else {
			var names []string
			for k, shard := range shards {
				cfg := offload.DefaultConfig(devs[k])
				cfg.TransferBlocks = d.blocks
				cfg.StreamDType, _ = offload.ParseStreamDType(d.streamDType) // checked by sessionOptions
				kb := sess.Backend
				if k < len(sess.Backends) {
					kb = sess.Backends[k]
				}
				if err := ftsession.StreamExp4Config(&cfg, d.streamCodec == "exp4", kb); err != nil {
					releaseAll(names)
					return err
				}
				if ent.host {
					cfg.HostBackend = sess.HostBackend
				}
				cfg.Trace = traceStep // FT_TRACE=1: each plan put in force, as run-model prints them
				budget, isMin, err := parseBenchBudget(b)
				if err != nil {
					return err
				}
				cfg.GPUBudget = budget
				if isMin {
					fp, err := offload.Measure(shard, cfg.Include, cfg.Exclude)
					if err != nil {
						return err
					}
					cfg.GPUBudget = fp.Min(slots)
					cfg.TransferBlocks = slots
				}
				name := fmt.Sprintf("bench-%d", i)
				if len(shards) > 1 {
					name = fmt.Sprintf("bench-%d-rank%d", i, k)
				}
				var compile []offload.Option
				if d.unitGraphs {
					compile = sess.UnitGraphOptions()
				}
				if err := offload.Offload(shard, &cfg, name, compile...); err != nil {
					releaseAll(names)
					return fmt.Errorf("budget %s on %s: %w", b, devs[k].Name(), err)
				}
				names = append(names, name)
			}
			skip := *warm + pre
			if ent.host {
				skip += hostPre
			}
			var tt *tokenTracer
			if traceTokens {
				var pass []func() offload.PassInfo
				for _, name := range names {
					pass = append(pass, offload.GetOffloadManager(name).LastPass)
				}
				untimed := fmt.Sprintf("%d forwards untimed", skip)
				if *mode == "decode" && *context > 0 {
					untimed = "the context's prefill and " + untimed
				}
				fmt.Fprintf(stderr, "token-trace: budget %s: %s, then %d timed\n", row.Budget, untimed, *iters)
				tt = newTokenTracer(stderr, "forward", pass...)
			}
			times, err = measureForwards(model, backend, *mode, *tokens, *context, skip, *iters, uint64(i), nil, tt)
			if err == nil {
				err = fillPlanRows(&row, names, devs)
			}
			if rerr := releaseAll(names); err == nil {
				err = rerr
			}
			model.DropUnitGraphs()
			if err != nil {
				return fmt.Errorf("budget %s: %w", row.Budget, err)
			}
		}
		row.MeasuredMs, row.MinMs = medianOf(times), slices.Min(times)
		if row.MeasuredMs > 0 && row.StreamedBytes > 0 {
			row.AggregateGBps = float64(row.StreamedBytes) / (row.MeasuredMs / 1e3) / 1e9
		}
		if row.FloorMs > 0 {
			row.MeasuredVsFlr = row.MeasuredMs / row.FloorMs
			row.PredictedError = (row.PredictedMs - row.MeasuredMs) / row.MeasuredMs
		}
		if *jsonOut {
			if err := json.NewEncoder(stdout).Encode(row); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintf(stdout, "%-12s %5d %5d %5d %5d %9.2f %8.1f %10.2f %10.2f %10.2f %8.3f %+7.1f%%\n", row.Budget, row.ResidentUnits,
			row.StreamedUnits, row.HostUnits, row.Slots, float64(row.StreamedBytes)/1e9, row.H2DGBps, row.FloorMs, row.PredictedMs,
			row.MeasuredMs, row.MeasuredVsFlr, 100*row.PredictedError)
		if row.GraphMs > 0 {
			fmt.Fprintf(stdout, "%-10s the same step replayed as a CUDA graph, token picked on the device: %.3f ms\n", "", row.GraphMs)
		}
		if row.GenerateMs > 0 {
			fmt.Fprintf(stdout, "%-10s greedy generation after a prompt of the context's length (run-model's loop): %.3f ms a token\n", "", row.GenerateMs)
		}
		printPerDevice(stdout, row)
	}
	return nil
}

func benchShape(mode string, tokens, context int) string {
	if mode == "decode" {
		return fmt.Sprintf("decode at context %d", context)
	}
	return fmt.Sprintf("prefill of %d tokens", tokens)
}

// planFigures are what the plan in force of an offload manager places and
// predicts: its units resident, streamed and on the host, its transfer
// blocks, the bytes it streams a forward and their copy time over the
// measured curve, the link's speed at the curve's largest copy, and the
// plan's floor and prediction.
type planFigures struct {
	budget                                    int64
	slots, resident, streamed, host           int
	streamedBytes                             int64
	transferMs, h2dGBps, floorMs, predictedMs float64
}

// planFiguresOf reads the plan in force of manager name.
func planFiguresOf(name string) (planFigures, error) {
	var f planFigures
	mgr := offload.GetOffloadManager(name)
	plan, err := mgr.Plan()
	if err != nil {
		return f, err
	}
	in, err := mgr.PlanInput()
	if err != nil {
		return f, err
	}
	f.budget, f.slots = in.Budget, plan.Slots
	for u, res := range plan.Resident {
		if plan.IsHost(u) {
			f.host++
		} else if res {
			f.resident++
		} else {
			f.streamed++
			f.streamedBytes += in.Units[u].LinkBytes() // packed, with --stream-codec exp4
			f.transferMs += in.Curve.Time(in.Units[u].LinkBytes()) * 1e3
		}
	}
	if pts := in.Curve.Points; len(pts) > 0 {
		last := pts[len(pts)-1]
		f.h2dGBps = float64(last.Bytes) / last.Seconds / 1e9
	}
	f.floorMs, f.predictedMs = plan.FloorSec*1e3, plan.PredictedSec*1e3
	return f, nil
}

// fillPlanRow copies the plan and memory figures of manager name into row.
func fillPlanRow(row *benchRow, name string, dev runtime.Device) error {
	f, err := planFiguresOf(name)
	if err != nil {
		return err
	}
	usage, err := offload.GetOffloadManager(name).GPUMemoryUsage()
	if err != nil {
		return err
	}
	row.BudgetBytes, row.Slots = f.budget, f.slots
	row.ResidentUnits, row.StreamedUnits, row.HostUnits = f.resident, f.streamed, f.host
	row.StreamedBytes, row.TransferMs, row.H2DGBps = f.streamedBytes, f.transferMs, f.h2dGBps
	row.FloorMs, row.PredictedMs = f.floorMs, f.predictedMs
	row.DeviceBytes, row.HostMappedBytes = usage.TotalBytes, usage.HostMappedBytes
	row.PinnedBytes = dev.HostMemory().InUse
	return nil
}

// measureForwards runs warm then iters forwards, returning wall times (ms).
// With kp set, one more forward runs after them under a kernel profile.
// With tt set (FT_TOKEN_TRACE=1), every forward but the profiled one is
// traced (the context's prefill and the warm ones as untimed) and the
// steady ones summarised.
func measureForwards(m *llama.Model, b kernels.Backend, mode string, tokens, context, warm, iters int, seed uint64, kp *kernelProfiler, tt *tokenTracer) ([]float64, error) {
	rng := rand.New(rand.NewPCG(seed, 2))
	randIDs := func(n int) []int32 {
		ids := make([]int32, n)
		for i := range ids {
			ids[i] = int32(rng.IntN(m.Cfg.VocabSize))
		}
		return ids
	}
	capacity := tokens
	if mode == "decode" {
		capacity = context + warm + iters // the prefill, then one position per forward
		if kp != nil {
			capacity++
		}
	}
	cache, err := m.NewKVCache(b, capacity)
	if err != nil {
		return nil, err
	}
	defer cache.Free()
	logits := make([]float32, m.Cfg.VocabSize)
	one := func(ids []int32, tt *tokenTracer, timed bool) (float64, error) {
		if err := interrupted(); err != nil {
			return 0, err
		}
		start := time.Now()
		lt, err := m.Forward(b, cache, ids, false)
		if err != nil {
			return 0, err
		}
		called := time.Now()
		if err := b.ReadF32(logits, lt); err != nil { // waits for the device
			return 0, err
		}
		if tt != nil {
			tt.step(called.Sub(start), time.Since(called), timed)
		}
		return float64(time.Since(start).Microseconds()) / 1e3, nil
	}
	if mode == "decode" && context > 0 {
		if _, err := one(randIDs(context), tt, false); err != nil {
			return nil, err
		}
	}
	var out []float64
	var s0 cpuSample // FT_TRACE=1: GC, steal, switches over the timed forwards
	for i := 0; i < warm+iters; i++ {
		if i == warm {
			s0 = sampleCPU()
		}
		var ids []int32
		if mode == "decode" {
			ids = randIDs(1)
		} else {
			cache.Reset()
			ids = randIDs(tokens)
		}
		ms, err := one(ids, tt, i >= warm)
		if err != nil {
			return nil, err
		}
		if i >= warm {
			out = append(out, ms)
		}
	}
	traceTimed(s0, out)
	if tt != nil {
		tt.summary()
	}
	if kp != nil {
		ids := randIDs(1)
		title := fmt.Sprintf("one decode step at context %d", context+warm+iters)
		if mode != "decode" {
			cache.Reset()
			ids = randIDs(tokens)
			title = fmt.Sprintf("a prefill of %d tokens", tokens)
		}
		if err := kp.profile(title, func() error { _, err := one(ids, nil, false); return err }); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func medianOf(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// randomIDs is n token ids below vocab from the PCG stream (seed, stream).
func randomIDs(n, vocab int, seed, stream uint64) []int32 {
	rng := rand.New(rand.NewPCG(seed, stream))
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(rng.IntN(vocab))
	}
	return ids
}

// measureGenerate times greedy generation as run-model runs it: the
// model's Generate after a prompt of context random tokens, the gaps
// between consecutive new tokens (as OnToken sees them) after the first
// three, iters of them. On the CUDA backend that is the device-fed loop
// (models/decoder/fed.go: each replayed step picks its token on the
// device and feeds the next, one step enqueued ahead of the host) where
// measureGraphSteps replays a step, then picks and reads its token
// before the next. No times where the context leaves no room for the
// tokens.
func measureGenerate(m *llama.Model, b kernels.Backend, context, iters int) ([]float64, error) {
	const warm = 3
	if iters < 1 || context+warm+iters+1 > m.Cfg.MaxPositionEmbeddings {
		return nil, nil
	}
	prompt := randomIDs(max(context, 1), m.Cfg.VocabSize, uint64(context), 7)
	var at []time.Time
	_, err := m.Generate(b, prompt, llama.GenerateOptions{MaxNewTokens: warm + iters + 1, IgnoreEOS: true,
		Context: cmdCtx, OnToken: func(int32) error {
			at = append(at, time.Now())
			return nil
		}})
	if err != nil {
		return nil, err
	}
	var out []float64
	for i := warm + 1; i < len(at); i++ {
		out = append(out, float64(at[i].Sub(at[i-1]).Microseconds())/1e3)
	}
	return out, nil
}

// measureGraphSteps times resident one-token steps the way generation runs
// them: a prefill of context random tokens, then steps replayed from a
// captured decode graph, each token picked on the device (kernels.Argmaxer)
// and fed to the next step. Backends that cannot capture give no times.
func measureGraphSteps(m *llama.Model, b kernels.Backend, context, iters int) ([]float64, error) {
	am, ok := b.(kernels.Argmaxer)
	if _, sc := b.(kernels.StepCapturer); !sc || !ok || m.Node().Tree().HasHooks() {
		return nil, nil
	}
	const warm = 3
	if context+warm+iters+1 > m.Cfg.MaxPositionEmbeddings {
		return nil, nil // no room for the graph's steps after the prefill
	}
	cache, err := m.NewKVCache(b, context+warm+iters+1)
	if err != nil {
		return nil, err
	}
	defer cache.Free()
	ids := randomIDs(max(context, 1), m.Cfg.VocabSize, uint64(context), 5)
	lt, err := m.Forward(b, cache, ids, false)
	if err != nil {
		return nil, err
	}
	var pick [1]int32
	if err := am.ArgmaxRows(pick[:], lt); err != nil {
		return nil, err
	}
	g, err := m.CaptureDecode(b, cache)
	if err != nil {
		return nil, nil // a model generation runs eagerly (sharded, MoE routed on the host): no graph line
	}
	defer g.Close()
	var out []float64
	for i := 0; i < warm+iters; i++ {
		if err := interrupted(); err != nil {
			return nil, err
		}
		start := time.Now()
		lt, err := g.Step(max(pick[0], 0))
		if err == nil {
			err = am.ArgmaxRows(pick[:], lt) // waits for the device
		}
		if err != nil {
			return nil, err
		}
		if i >= warm {
			out = append(out, float64(time.Since(start).Microseconds())/1e3)
		}
	}
	if t, ok := b.(blockTracer); ok && t.BlockTraceOn() {
		// FT_BLOCK_TRACE: one more step, its blocks' times written out
		if err := t.BlockTraceReset(); err != nil {
			return nil, err
		}
		lt, err := g.Step(max(pick[0], 0))
		if err == nil {
			err = am.ArgmaxRows(pick[:], lt)
		}
		if err == nil {
			err = t.BlockTraceWrite(fmt.Sprintf("replayed decode step at context %d", context))
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// blockTracer is a backend whose kernels may record their blocks' times
// (the CUDA backend under FT_BLOCK_TRACE): measureGraphSteps then writes
// one more replayed step's launches out.
type blockTracer interface {
	BlockTraceOn() bool
	BlockTraceReset() error
	BlockTraceWrite(label string) error
}
