package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/models/kvcache"
	"github.com/flextensor-go/flextensor/offload"
	ftsession "github.com/flextensor-go/flextensor/session"
)

// batchBenchRow is one (budget, batch size) measurement of bench --batch.
type batchBenchRow struct {
	Budget       string  `json:"budget"`
	Batch        int     `json:"batch"`
	Context      int     `json:"context"`
	StepMs       float64 `json:"step_ms"`      // median batched decode step
	MinMs        float64 `json:"min_ms"`       // fastest step
	TokensPerSec float64 `json:"tokens_per_s"` // batch / step
	KVBytes      int64   `json:"kv_cache_bytes"`
	// StepsMs are the timed steps in the order they ran (what the median
	// and the minimum are of: a drift across them, a GPU's clocks falling
	// under a long load, shows here).
	StepsMs []float64 `json:"steps_ms"`
	// ResidentUnits, StreamedUnits and HostUnits are the placement of the
	// offloaded budgets' plan in force after the measured steps (0, 0, 0
	// when resident). Budget "B+host" rows (--host-threads) plan three
	// ways for the batch's tokens (FT_BATCH_HOST=off: two ways, no unit
	// on the host).
	ResidentUnits int `json:"resident_units"`
	StreamedUnits int `json:"streamed_units"`
	HostUnits     int `json:"host_units"`
	// The offloaded budgets' plan in force after the measured steps, made
	// at the batch's tokens a forward (all 0 when resident): the bytes it
	// streams a step, their copy time over the measured curve, the link's
	// speed, the plan's floor (the larger of its compute and that copy
	// time) and prediction, and the median step over the floor.
	StreamedBytes int64   `json:"streamed_bytes,omitempty"`
	H2DGBps       float64 `json:"h2d_gbps,omitempty"`
	TransferMs    float64 `json:"transfer_floor_ms,omitempty"`
	FloorMs       float64 `json:"floor_ms,omitempty"`
	PredictedMs   float64 `json:"predicted_ms,omitempty"`
	MeasuredVsFlr float64 `json:"measured_over_floor,omitempty"`
	// SettleSteps are the decode steps run after the warm-ups of an
	// offloaded budget before the timed ones, until the engine's last pass
	// was steady under the plan of the batch's own size (a new size's
	// bucket is measured, planned and switched to over several passes:
	// offload.TokenCounter); maxSettleSteps of them and still unsettled
	// sets Unsettled.
	SettleSteps int  `json:"settle_steps,omitempty"`
	Unsettled   bool `json:"unsettled,omitempty"`
	// UnsteadySteps counts the timed steps of an offloaded budget whose
	// pass was not steady under the plan of its own size (a measuring
	// pass, a replan's change of placement): their times are in StepsMs.
	UnsteadySteps int `json:"unsteady_steps,omitempty"`
	// PrefillTokens is each sequence's prompt length with --mode prefill
	// (each step prefills Batch sequences of it packed in one forward, and
	// TokensPerSec counts the prompt tokens); 0 for decode steps.
	PrefillTokens int `json:"prefill_tokens,omitempty"`
}

// parseBatchSizes reads --batch "1,16,64".
func parseBatchSizes(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n <= 0 {
			return nil, usagef("--batch: %q is not a positive batch size (want e.g. 1,16,64)", part)
		}
		out = append(out, n)
	}
	return out, nil
}

// benchBatch is bench --batch: for each budget, batched decode steps of
// each batch size at --context, as tokens per second.
func benchBatch(o *benchOptions, stdout io.Writer) error {
	sizes, err := parseBatchSizes(o.batch)
	if err != nil {
		return err
	}
	prefill := o.mode == "prefill"
	if o.mode != "decode" && !prefill {
		return usagef("--mode %q: want decode or prefill", o.mode)
	}
	if prefill && o.d.kvCache != "" {
		return usagef("--kv-cache does not apply to --mode prefill: each step's cache holds exactly its sequences")
	}
	if o.context < 0 || o.iters <= 0 || o.warm < 0 || (prefill && o.tokens <= 0) {
		return usagef("--iters, --tokens must be positive; --context, --warmup not negative")
	}
	d := o.d
	if d.gpuBudget != "" || d.profile != "" {
		return usagef("bench takes its budgets from --budgets; --gpu-budget and --profile do not apply")
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
	dir, dev, backend, model := sess.Dir, sess.Device, sess.Backend, sess.Model
	if prefill && o.tokens > model.Cfg.MaxPositionEmbeddings {
		return usagef("--tokens %d exceeds the model's context of %d (max_position_embeddings)", o.tokens, model.Cfg.MaxPositionEmbeddings)
	}
	if !o.jsonOut && prefill {
		fmt.Fprintf(stdout, "%s on %s, batched prefill of --batch sequences × %d tokens packed in one forward, %d layers\n", sess.name(), dev.Name(), o.tokens, model.Cfg.NumHiddenLayers)
	} else if !o.jsonOut {
		fmt.Fprintf(stdout, "%s on %s, batched decode at context %d, %d layers\n", sess.name(), dev.Name(), o.context, model.Cfg.NumHiddenLayers)
	}
	if !o.jsonOut {
		fmt.Fprintf(stdout, "%-12s %6s %5s %5s %5s %10s %10s %12s %10s %9s %9s %9s\n", "budget", "batch", "res", "str", "host", "step ms", "min ms", "tokens/s", "KV MiB",
			"H2D GB/s", "floor ms", "meas/flr")
	}
	emit := func(row batchBenchRow) error {
		if o.jsonOut {
			return json.NewEncoder(stdout).Encode(row)
		}
		plan := fmt.Sprintf(" %9s %9s %9s", "-", "-", "-") // resident: no plan
		if row.FloorMs > 0 {
			plan = fmt.Sprintf(" %9.1f %9.2f %9.3f", row.H2DGBps, row.FloorMs, row.MeasuredVsFlr)
		}
		_, err := fmt.Fprintf(stdout, "%-12s %6d %5d %5d %5d %10.2f %10.2f %12.1f %10.1f%s\n", row.Budget, row.Batch, row.ResidentUnits,
			row.StreamedUnits, row.HostUnits, row.StepMs, row.MinMs, row.TokensPerSec, float64(row.KVBytes)/(1<<20), plan)
		if err != nil || len(row.StepsMs) < 2 {
			return err
		}
		steps := make([]string, len(row.StepsMs))
		for i, ms := range row.StepsMs {
			steps[i] = strconv.FormatFloat(ms, 'f', 2, 64)
		}
		note := ""
		if row.SettleSteps > 0 || row.Unsettled || row.UnsteadySteps > 0 {
			note = fmt.Sprintf(" (after %d settling steps", row.SettleSteps)
			if row.Unsettled {
				note += ", the engine still unsettled"
			}
			if row.UnsteadySteps > 0 {
				note += fmt.Sprintf("; %d not steady", row.UnsteadySteps)
			}
			note += ")"
		}
		_, err = fmt.Fprintf(stdout, "%12s steps ms, in order: %s%s\n", "", strings.Join(steps, " "), note)
		return err
	}
	// manager names the offload manager of the budget being measured ("" when
	// resident): its profiling pauses while the sequences are prefilled, so
	// plans are made and measured at the decode steps' size.
	manager := ""
	measure := func(budget string, m *decoder.Model, warm int) error {
		var pause func() func()
		if manager != "" {
			name := manager
			pause = func() func() { return offload.PauseProfiling(name) }
		}
		for _, B := range sizes {
			var kp *kernelProfiler
			if o.kernelProfile && manager == "" {
				kp = &kernelProfiler{w: stdout, dev: backend.Device()}
			}
			var settle func() bool // an offloaded budget's engine steady under the plan of this size
			if manager != "" {
				mg := offload.GetOffloadManager(manager)
				settle = func() bool { p := mg.LastPass(); return p.Steady() && p.OnOwnPlan() }
			}
			var r batchSteps
			var err error
			perStep := B // tokens a step makes (decode) or takes (prefill)
			if prefill {
				r, err = measureBatchPrefill(m, backend, B, o.tokens, warm, o.iters, uint64(B), settle, kp)
				perStep = B * o.tokens
			} else {
				r, err = measureBatchSteps(m, backend, B, o.context, warm, o.iters, uint64(B), d.kvCache, pause, settle, kp)
			}
			if err != nil {
				return fmt.Errorf("budget %s, batch %d: %w", budget, B, err)
			}
			med := medianOf(r.times)
			row := batchBenchRow{Budget: budget, Batch: B, Context: o.context, StepMs: med, MinMs: slices.Min(r.times), StepsMs: r.times,
				TokensPerSec: float64(perStep) / (med / 1e3), KVBytes: r.kvBytes, SettleSteps: r.settle, Unsettled: r.unsettled, UnsteadySteps: r.unsteady}
			if prefill {
				row.Context, row.PrefillTokens = 0, o.tokens
			}
			if manager != "" {
				mg := offload.GetOffloadManager(manager)
				row.ResidentUnits, row.StreamedUnits, row.HostUnits = len(mg.ResidentUnits()), len(mg.OffloadUnits()), len(mg.HostUnits())
				f, err := planFiguresOf(manager)
				if err != nil {
					return fmt.Errorf("budget %s, batch %d: %w", budget, B, err)
				}
				row.StreamedBytes, row.H2DGBps, row.TransferMs = f.streamedBytes, f.h2dGBps, f.transferMs
				row.FloorMs, row.PredictedMs = f.floorMs, f.predictedMs
				if f.floorMs > 0 {
					row.MeasuredVsFlr = med / f.floorMs
				}
			}
			if err := emit(row); err != nil {
				return err
			}
			warm = o.warm // the engine is past profiling after the first size; a new size's bucket settles (settle)
		}
		return nil
	}
	// With --host-threads each offloaded budget B runs twice: the two-way
	// plan, then "B+host", the engine given the host backend (bench's
	// rows for one sequence do the same).
	type entry struct {
		budget string
		host   bool
	}
	var entries []entry
	for _, b := range strings.Split(o.budgets, ",") {
		b = strings.TrimSpace(b)
		entries = append(entries, entry{b, false})
		if sess.HostBackend != nil && b != "resident" {
			entries = append(entries, entry{b, true})
		}
	}
	for i, ent := range entries {
		b := ent.budget
		if b == "resident" {
			manager = ""
			m, ck, err := ftsession.Load(dir, dev)
			if err != nil {
				return fmt.Errorf("budget resident: %w", err)
			}
			err = measure(b, m, o.warm)
			m.Close()
			ck.Close()
			if err != nil {
				return err
			}
			continue
		}
		cfg := offload.DefaultConfig(dev)
		cfg.TransferBlocks = d.blocks
		if err := ftsession.StreamExp4Config(&cfg, d.streamCodec == "exp4", backend); err != nil {
			return err
		}
		label := b
		if ent.host {
			cfg.HostBackend, label = sess.HostBackend, b+"+host"
		}
		cfg.Trace = traceStep // FT_TRACE=1: each plan put in force, as bench's single-sequence rows print them
		budget, isMin, err := parseBenchBudget(b)
		if err != nil {
			return err
		}
		cfg.GPUBudget = budget
		if isMin {
			slots := max(d.blocks, 2)
			fp, err := offload.Measure(model, cfg.Include, cfg.Exclude)
			if err != nil {
				return err
			}
			cfg.GPUBudget = fp.Min(slots)
			cfg.TransferBlocks = slots
		}
		name := fmt.Sprintf("bench-batch-%d", i)
		manager = name
		if err := offload.Offload(model, &cfg, name); err != nil {
			return fmt.Errorf("budget %s: %w", b, err)
		}
		// Discovery and profiling forwards come before INFERENCE.
		err = measure(label, model, o.warm+3)
		if rerr := offload.Release(name, true); err == nil {
			err = rerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// maxSettleSteps bounds the steps measureBatchSteps runs waiting for an
// offloaded budget's engine to settle at a batch size (a new bucket: one
// warm-up and Config.ProfilingIters measured passes, then
// tokenSwitchPasses before the switch and one after it; 32 leaves room for
// a replan's passes too).
const maxSettleSteps = 32

// batchSteps is what measureBatchSteps measured: the timed steps' wall
// times (ms), the settling steps run, whether the engine was still not
// settled after them, the timed steps it was not settled at, and the KV
// cache's bytes.
type batchSteps struct {
	times            []float64
	settle, unsteady int
	unsettled        bool
	kvBytes          int64
}

// timeSteps runs warm untimed steps, then, with settle set, more until
// settle reports true after a step of this size (at most maxSettleSteps),
// then iters timed ones: the batchSteps of those (no KV bytes).
func timeSteps(step func() (float64, error), warm, iters int, settle func() bool) (batchSteps, error) {
	var r batchSteps
	for range warm {
		if _, err := step(); err != nil {
			return r, err
		}
	}
	// Before any step of this size settle reads the last size's pass.
	for settle != nil && (warm+r.settle == 0 || !settle()) && r.settle < maxSettleSteps {
		if _, err := step(); err != nil {
			return r, err
		}
		r.settle++
	}
	r.unsettled = settle != nil && !settle()
	for range iters {
		ms, err := step()
		if err != nil {
			return r, err
		}
		r.times = append(r.times, ms)
		if settle != nil && !settle() {
			r.unsteady++
		}
	}
	return r, nil
}

// measureBatchSteps prefills B sequences of context random tokens (packed
// several to a forward), then runs warm decode steps of all B at once,
// then, with settle set, more until settle reports true (at most
// maxSettleSteps), then times iters more (batchSteps). The
// cache holds every sequence's positions, or with kvFlag (--kv-cache) that
// memory, which must hold them. pause, when set, pauses the offload
// engine's profiling for the prefills (PauseProfiling) and returns the
// resume.
func measureBatchSteps(m *decoder.Model, b kernels.Backend, B, context, warm, iters int, seed uint64, kvFlag string, pause func() func(), settle func() bool, kp *kernelProfiler) (batchSteps, error) {
	rng := rand.New(rand.NewPCG(seed, 3))
	randIDs := func(n int) []int32 {
		ids := make([]int32, n)
		for i := range ids {
			ids[i] = int32(rng.IntN(m.Cfg.VocabSize))
		}
		return ids
	}
	steps := warm + iters
	if kp != nil {
		steps++ // the profiled step
	}
	if settle != nil {
		steps += maxSettleSteps
	}
	perSeq := (context + steps + kvcache.DefaultBlockSize - 1) / kvcache.DefaultBlockSize
	blocks := B * perSeq
	if kvFlag != "" {
		n, err := kvCacheBlocksFromFlag(kvFlag, m, b)
		if err != nil {
			return batchSteps{}, err
		}
		if n < blocks {
			return batchSteps{}, usagef("--kv-cache %s holds %d KV blocks; %d sequences of %d positions need %d", kvFlag, n, B, context+steps, blocks)
		}
		blocks = n
	}
	cache, err := m.NewPagedCache(b, blocks, 0)
	if err != nil {
		return batchSteps{}, err
	}
	defer cache.Close()
	seqs := make([]*kvcache.Seq, B)
	for i := range seqs {
		seqs[i] = cache.NewSeq()
	}
	defer func() {
		for _, s := range seqs {
			s.Free()
		}
	}()
	logits := make([]float32, 0)
	var picks []int32
	step := func(entries []decoder.BatchEntry) (float64, error) {
		start := time.Now()
		lt, err := m.ForwardBatch(b, cache, entries)
		if err != nil {
			return 0, err
		}
		// Greedy picks, as the scheduler makes them: on the device where the
		// backend can (one int a row back), else from the logits read back.
		if am, ok := b.(kernels.Argmaxer); ok {
			picks = slices.Grow(picks[:0], len(entries))[:len(entries)]
			if err := am.ArgmaxRows(picks, lt); err != nil { // waits for the device
				return 0, err
			}
		} else {
			logits = slices.Grow(logits[:0], lt.NumElements())[:lt.NumElements()]
			if err := b.ReadF32(logits, lt); err != nil { // waits for the device
				return 0, err
			}
		}
		return float64(time.Since(start).Microseconds()) / 1e3, nil
	}
	prefill := func() error {
		group := max(1, 2048/context)
		for lo := 0; lo < B; lo += group {
			var entries []decoder.BatchEntry
			for _, s := range seqs[lo:min(B, lo+group)] {
				entries = append(entries, decoder.BatchEntry{Seq: s, IDs: randIDs(context)})
			}
			if _, err := step(entries); err != nil {
				return err
			}
		}
		return nil
	}
	if context > 0 {
		resume := func() {}
		if pause != nil {
			resume = pause()
		}
		err := prefill()
		resume()
		if err != nil {
			return batchSteps{}, err
		}
	}
	decode := func() (float64, error) { // one token more for every sequence
		entries := make([]decoder.BatchEntry, B)
		for j, s := range seqs {
			entries[j] = decoder.BatchEntry{Seq: s, IDs: randIDs(1)}
		}
		return step(entries)
	}
	r, err := timeSteps(decode, warm, iters, settle)
	if err != nil {
		return batchSteps{}, err
	}
	if kp != nil {
		title := fmt.Sprintf("one batched decode step of %d sequences at context %d", B, context+warm+r.settle+iters)
		if err := kp.profile(title, func() error { _, err := decode(); return err }); err != nil {
			return batchSteps{}, err
		}
	}
	r.kvBytes = cache.Bytes()
	return r, nil
}

// measureBatchPrefill times packed prefills: each step is one ForwardBatch
// of B fresh sequences of tokens random ids each (no padding), their first
// tokens picked as a server would, then the sequences freed. With kp set,
// one more step runs under a kernel profile. With settle set, steps run
// after the warm ones until it reports true, as measureBatchSteps's do.
func measureBatchPrefill(m *decoder.Model, b kernels.Backend, B, tokens, warm, iters int, seed uint64, settle func() bool, kp *kernelProfiler) (batchSteps, error) {
	rng := rand.New(rand.NewPCG(seed, 7))
	perSeq := (tokens + kvcache.DefaultBlockSize - 1) / kvcache.DefaultBlockSize
	cache, err := m.NewPagedCache(b, B*perSeq, 0)
	if err != nil {
		return batchSteps{}, err
	}
	defer cache.Close()
	picks := make([]int32, B)
	var logits []float32
	step := func() (float64, error) {
		if err := interrupted(); err != nil {
			return 0, err
		}
		entries := make([]decoder.BatchEntry, B)
		for i := range entries {
			ids := make([]int32, tokens)
			for j := range ids {
				ids[j] = int32(rng.IntN(m.Cfg.VocabSize))
			}
			entries[i] = decoder.BatchEntry{Seq: cache.NewSeq(), IDs: ids}
		}
		defer func() {
			for _, e := range entries {
				e.Seq.Free()
			}
		}()
		start := time.Now()
		lt, err := m.ForwardBatch(b, cache, entries)
		if err != nil {
			return 0, err
		}
		if am, ok := b.(kernels.Argmaxer); ok {
			err = am.ArgmaxRows(picks, lt) // waits for the device
		} else {
			logits = slices.Grow(logits[:0], lt.NumElements())[:lt.NumElements()]
			err = b.ReadF32(logits, lt)
		}
		if err != nil {
			return 0, err
		}
		return float64(time.Since(start).Microseconds()) / 1e3, nil
	}
	r, err := timeSteps(step, warm, iters, settle)
	if err != nil {
		return batchSteps{}, err
	}
	if kp != nil {
		title := fmt.Sprintf("one packed prefill of %d sequences × %d tokens", B, tokens)
		if err := kp.profile(title, func() error { _, err := step(); return err }); err != nil {
			return batchSteps{}, err
		}
	}
	r.kvBytes = cache.Bytes()
	return r, nil
}
