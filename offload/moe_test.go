package offload_test

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// Switch is a custom model with data-dependent branches, a tiny mixture of
// experts: per layer h ← h + Proj·h (the "attention", a dense unit), then a
// router picks each token's top-k experts by the values of its logits; the
// experts of the layer run in ascending order, each on the rows of the
// tokens that chose it (so an expert may run several times in a pass, or not
// at all), and their outputs are added to those rows. A "shared" block runs
// only when the forward carries an odd number of tokens (a conditional
// branch that is never announced). The MoE module announces the experts it
// will call (nn.Announce); Switch names its offload units (UnitSelector).
type Switch struct {
	nn.Base
	Embed  *nn.Embedding
	Layers []*SwitchLayer
	Norm   *nn.RMSNorm
	TopK   int

	// calls counts each expert's calls in the latest forward, by name.
	calls map[string]int
	// failIn, when set, makes the named expert's forward fail (an error,
	// or a panic with failPanic) once.
	failIn    string
	failPanic bool
	// announce, when set, rewrites what a MoE block announces (the
	// experts it will call, in order): announcements are advisory.
	announce func(layer int, next []nn.Module) []nn.Module
}

// SwitchLayer is one layer: the dense block and the MoE block.
type SwitchLayer struct {
	nn.Base
	Attn *SwitchAttn
	MoE  *SwitchMoE
}

// SwitchAttn is the dense block: h ← h + Proj·h.
type SwitchAttn struct {
	nn.Base
	Proj *nn.Linear
}

// SwitchMoE is the router, the experts and the conditional shared block.
type SwitchMoE struct {
	nn.Base
	Router  *nn.Linear
	Experts []*TowerBlock
	Shared  *TowerBlock
	// announcer makes the block an nn.ChildAnnouncer that says so
	// (AnnouncesChildren), as a model's MoE block does: the engine's
	// pre-flight check then counts its units as announced.
	announcer bool
}

// AnnouncesChildren is the announcer field (nn.ChildAnnouncer).
func (m *SwitchMoE) AnnouncesChildren() bool { return m.announcer }

// OffloadUnits makes the dense blocks, each expert and the shared blocks
// the units (offload.UnitSelector).
func (s *Switch) OffloadUnits() (include, exclude []string) {
	return []string{"layers.*.attn", "layers.*.moe.experts.*", "layers.*.moe.shared"}, nil
}

const switchVocab = 64

// NewSwitch builds a Switch of BF16 weights on host.
func NewSwitch(host runtime.Device, layers, experts, topK, dim, hidden int, seed uint64) (*Switch, error) {
	s := &Switch{TopK: topK, calls: map[string]int{}}
	nn.Init(s, "")
	rng := rand.New(rand.NewPCG(seed, 3))
	fill := func(p *nn.Parameter, scale float32, shape ...int) error {
		x, err := runtime.NewTensor(host, runtime.BF16, shape, p.Name())
		if err != nil {
			return err
		}
		for i := range x.U16() {
			x.U16()[i] = runtime.F32ToBF16(float32(rng.NormFloat64()) * scale)
		}
		return p.Bind(x)
	}
	block := func(parent nn.Module, name string) (*TowerBlock, error) {
		b := &TowerBlock{}
		nn.Attach(parent, name, b)
		b.In = nn.NewLinear(b, "in", dim, hidden)
		b.Gate = nn.NewLinear(b, "gate", dim, hidden)
		b.Out = nn.NewLinear(b, "out", hidden, dim)
		for _, l := range []*nn.Linear{b.In, b.Gate, b.Out} {
			if err := fill(l.Weight, 1/float32(dim), l.Out, l.In); err != nil {
				return nil, err
			}
		}
		return b, nil
	}
	s.Embed = nn.NewEmbedding(s, "embed", switchVocab, dim)
	if err := fill(s.Embed.Weight, 1, switchVocab, dim); err != nil {
		return nil, err
	}
	ls := nn.NewContainer(s, "layers")
	for i := 0; i < layers; i++ {
		l := &SwitchLayer{}
		nn.Attach(ls, fmt.Sprint(i), l)
		l.Attn = &SwitchAttn{}
		nn.Attach(l, "attn", l.Attn)
		l.Attn.Proj = nn.NewLinear(l.Attn, "proj", dim, dim)
		if err := fill(l.Attn.Proj.Weight, 1/float32(dim), dim, dim); err != nil {
			return nil, err
		}
		l.MoE = &SwitchMoE{}
		nn.Attach(l, "moe", l.MoE)
		l.MoE.Router = nn.NewLinear(l.MoE, "router", dim, experts)
		if err := fill(l.MoE.Router.Weight, 1, experts, dim); err != nil {
			return nil, err
		}
		ex := nn.NewContainer(l.MoE, "experts")
		for e := 0; e < experts; e++ {
			b, err := block(ex, fmt.Sprint(e))
			if err != nil {
				return nil, err
			}
			l.MoE.Experts = append(l.MoE.Experts, b)
		}
		var err error
		if l.MoE.Shared, err = block(l.MoE, "shared"); err != nil {
			return nil, err
		}
		s.Layers = append(s.Layers, l)
	}
	s.Norm = nn.NewRMSNorm(s, "norm", dim, 1e-6)
	return s, fill(s.Norm.Weight, 1, dim)
}

// errExpert is the error an expert armed with failIn returns.
var errExpert = errors.New("expert forward fails")

// Forward runs ids through the model and returns the normed hidden state
// [T, dim] as float32 values.
func (s *Switch) Forward(b kernels.Backend, ids []int32) ([]float32, error) {
	T := len(ids)
	dim := s.Norm.Dim
	hidden := s.Layers[0].MoE.Experts[0].In.Out
	nE := len(s.Layers[0].MoE.Experts)
	act := b.ActDType()
	var bufs []*runtime.Tensor
	alloc := func(shape ...int) (*runtime.Tensor, error) {
		t, err := runtime.NewTensor(b.Device(), act, shape, "switch activation")
		if err == nil {
			bufs = append(bufs, t)
		}
		return t, err
	}
	defer func() {
		for _, t := range bufs {
			t.Buffer().Free()
		}
	}()
	clear(s.calls)
	var out []float32
	err := nn.Call(s, func() error {
		h, err := alloc(T, dim)
		if err != nil {
			return err
		}
		o, err := alloc(T, dim)
		if err != nil {
			return err
		}
		a, err := alloc(1, hidden)
		if err != nil {
			return err
		}
		g, err := alloc(1, hidden)
		if err != nil {
			return err
		}
		eo, err := alloc(1, dim)
		if err != nil {
			return err
		}
		logits, err := alloc(T, nE)
		if err != nil {
			return err
		}
		if err := s.Embed.Forward(b, h, ids); err != nil {
			return err
		}
		expert := func(blk *TowerBlock, x, acc *runtime.Tensor) error {
			return nn.Call(blk, func() error {
				s.calls[blk.Node().Name()]++
				if s.failIn == blk.Node().Name() {
					s.failIn = ""
					if s.failPanic {
						panic("expert forward panics")
					}
					return errExpert
				}
				if err := blk.In.Forward(b, a, x); err != nil {
					return err
				}
				if err := blk.Gate.Forward(b, g, x); err != nil {
					return err
				}
				if err := b.SiLUMul(a, g, a); err != nil {
					return err
				}
				if err := blk.Out.Forward(b, eo, a); err != nil {
					return err
				}
				return b.Add(acc, acc, eo)
			})
		}
		for li, l := range s.Layers {
			if err := nn.Call(l.Attn, func() error {
				if err := l.Attn.Proj.Forward(b, o, h); err != nil {
					return err
				}
				return b.Add(h, h, o)
			}); err != nil {
				return err
			}
			if err := nn.Call(l.MoE, func() error {
				if err := l.MoE.Router.Forward(b, logits, h); err != nil {
					return err
				}
				lv := make([]float32, T*nE)
				if err := b.ReadF32(lv, logits); err != nil {
					return err
				}
				rows := make([][]int, nE) // the tokens routed to each expert
				for t := 0; t < T; t++ {
					for _, e := range topK(lv[t*nE:(t+1)*nE], s.TopK) {
						rows[e] = append(rows[e], t)
					}
				}
				var next []nn.Module
				for e, r := range rows {
					if len(r) > 0 {
						next = append(next, l.MoE.Experts[e])
					}
				}
				if s.announce != nil {
					next = s.announce(li, next)
				}
				nn.Announce(l.MoE, next...)
				// Each call reads its token's row of h and adds its
				// output to it: the next expert of that token reads the
				// sum (deterministic, the same with and without offload).
				for e, r := range rows {
					for _, t := range r {
						x, _ := h.Slice(t, t+1)
						if err := expert(l.MoE.Experts[e], x, x); err != nil {
							return err
						}
					}
				}
				if T%2 == 1 {
					for t := 0; t < T; t++ {
						x, _ := h.Slice(t, t+1)
						if err := expert(l.MoE.Shared, x, x); err != nil {
							return err
						}
					}
				}
				return nil
			}); err != nil {
				return err
			}
		}
		if err := s.Norm.Forward(b, o, h); err != nil {
			return err
		}
		out = make([]float32, T*dim)
		return b.ReadF32(out, o)
	})
	return out, err
}

// topK returns the indices of the k largest values (ties: the lower
// index), ascending.
func topK(v []float32, k int) []int {
	idx := make([]int, len(v))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return v[idx[a]] > v[idx[b]] })
	out := slices.Clone(idx[:k])
	slices.Sort(out)
	return out
}

// switchShape is the Switch the tests offload: 3 layers of 8 experts, top 2.
const (
	swLayers, swExperts, swTopK, swDim, swHidden = 3, 8, 2, 32, 64
	swSeed                                       = 5
)

// hostSwitch builds the test Switch on a fresh host device (closed, and
// checked for leaks, by a cleanup).
func hostSwitch(t *testing.T) *Switch {
	t.Helper()
	return hostSwitchOf(t, swLayers, swExperts, swTopK, swDim, swHidden)
}

// hostSwitchOf builds a Switch of the given shape on a fresh host device.
func hostSwitchOf(t *testing.T, layers, experts, topK, dim, hidden int) *Switch {
	t.Helper()
	host := runtime.NewCPU(0)
	t.Cleanup(func() {
		if err := host.Close(); err != nil {
			t.Errorf("host device: %v", err)
		}
	})
	s, err := NewSwitch(host, layers, experts, topK, dim, hidden, swSeed)
	if err != nil {
		t.Fatal(err)
	}
	weights := map[*runtime.DeviceBuffer]bool{}
	for _, p := range nn.Parameters(s) {
		weights[p.Peek().Buffer()] = true
	}
	t.Cleanup(func() {
		for b := range weights {
			b.Free()
		}
	})
	return s
}

// switchInputs is n passes of token ids, 1 to 5 tokens each, so routes,
// the experts' repeat counts and the shared branch vary from pass to pass.
func switchInputs(n int, seed uint64) [][]int32 {
	rng := rand.New(rand.NewPCG(seed, 9))
	var out [][]int32
	for p := 0; p < n; p++ {
		ids := make([]int32, 1+(p*3+int(seed))%5)
		for i := range ids {
			ids[i] = int32(rng.IntN(switchVocab))
		}
		out = append(out, ids)
	}
	return out
}

// deviceInput is nothing: Switch embeds its ids on the backend's device.

// switchPasses runs every input through s and returns the outputs and each
// pass's expert calls.
func switchPasses(t *testing.T, s *Switch, b kernels.Backend, inputs [][]int32) ([][]float32, []map[string]int) {
	t.Helper()
	var outs [][]float32
	var calls []map[string]int
	for i, ids := range inputs {
		out, err := s.Forward(b, ids)
		if err != nil {
			t.Fatalf("pass %d (%d tokens): %v", i, len(ids), err)
		}
		outs = append(outs, out)
		c := map[string]int{}
		for k, v := range s.calls {
			c[k] = v
		}
		calls = append(calls, c)
	}
	return outs, calls
}

// offloadSwitch offloads a fresh Switch on d with budget (0: everything
// fits) and the model's own units, and a cleanup releasing it.
func offloadSwitch(t *testing.T, d devtest.Device, budget int64, edit func(*offload.Config)) (*Switch, string) {
	t.Helper()
	return offloadThis(t, hostSwitch(t), d, budget, edit)
}

// offloadThis offloads s (see offloadSwitch).
func offloadThis(t *testing.T, s *Switch, d devtest.Device, budget int64, edit func(*offload.Config)) (*Switch, string) {
	t.Helper()
	name := uniqueName(t)
	cfg := offload.DefaultConfig(d.Dev)
	cfg.GPUBudget = offload.Budget{Bytes: budget}
	cfg.OffloadTiming = offload.TimingEager
	if edit != nil {
		edit(&cfg)
	}
	if err := offload.Offload(s, &cfg, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if offload.GetOffloadManager(name).Phase() != offload.PhaseIdle {
			if err := offload.Release(name, true); err != nil {
				t.Errorf("Release: %v", err)
			}
		}
	})
	return s, name
}

// compute is the backend a test runs the offloaded model with: on the CPU
// strictBackend, which refuses a weight left in host memory.
func compute(d devtest.Device) kernels.Backend {
	if d.Kind() == runtime.KindCPU {
		return strictBackend{d.Backend, d.Dev}
	}
	return d.Backend
}

func sameOutputs(t *testing.T, got, want [][]float32, what string) {
	t.Helper()
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Fatalf("%s: pass %d differs from the resident run by up to %.3g", what, i, devtest.MaxAbsDiff(got[i], want[i]))
		}
	}
}

// TestAnnouncedUnitsEqualResident offloads the Switch, whose experts run
// zero, one or several times a pass in an order its router picks from the
// data, at budgets from "one pool slot and one ring slot" (every expert
// streamed through a single slot) to "everything resident", over many
// passes with different routes: every pass equals the resident model's bit
// for bit, no pass fails (also those that skip most experts and the shared
// blocks, or run an expert twice), and the expert cache's counts add up.
// On a GPU (built with -tags cuda) the cuda:0 subtest runs the same.
func TestAnnouncedUnitsEqualResident(t *testing.T) {
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		inputs := switchInputs(24, 1)
		probe := hostSwitch(t)
		fp, err := offload.Measure(probe, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if want := swLayers * (swExperts + 2); len(fp.UnitNames) != want {
			t.Fatalf("the model's own units: %d (%v), want %d (attention, experts and shared block per layer)", len(fp.UnitNames), fp.UnitNames, want)
		}
		var attnBytes, expertBytes int64
		for i, n := range fp.UnitNames {
			if strings.HasSuffix(n, ".attn") {
				attnBytes = fp.UnitBytes[i]
			} else {
				expertBytes = max(expertBytes, fp.UnitBytes[i])
			}
		}
		// The reference: everything resident through the engine (on the
		// CPU also checked against the model run without it).
		ref, refName := offloadSwitch(t, d, fp.TotalBytes, nil)
		want, wantCalls := switchPasses(t, ref, compute(d), inputs)
		if d.Kind() == runtime.KindCPU {
			plain := hostSwitch(t)
			hb, _ := kernels.NewCPUBackend(plain.Norm.Weight.Peek().Device())
			direct, _ := switchPasses(t, plain, hb, inputs)
			sameOutputs(t, want, direct, "resident offload against no offload")
		}
		if st := offload.GetOffloadManager(refName).PoolStats(); st.HitRate() != 1 || st.Misses != 0 {
			t.Errorf("all resident: pool stats %+v, want every call a hit", st)
		}
		// The data must exercise what the engine has to survive.
		repeats, skipsShared := false, false
		for i, c := range wantCalls[3:] {
			for name, n := range c {
				repeats = repeats || (n > 1 && strings.Contains(name, "experts"))
			}
			skipsShared = skipsShared || len(inputs[3+i])%2 == 0
		}
		if !repeats || !skipsShared {
			t.Fatalf("inputs do not exercise repeats (%v) and skipped branches (%v)", repeats, skipsShared)
		}

		for _, c := range []struct {
			name      string
			budget    int64
			poolSlots int // expected, 0: any
		}{
			{"pool-of-one", fp.FixedBytes + attnBytes + expertBytes, 1},
			{"attention-resident", fp.FixedBytes + swLayers*attnBytes + 3*expertBytes, 0},
			{"half", fp.FixedBytes + (fp.TotalBytes-fp.FixedBytes)/2, 0},
		} {
			t.Run(c.name, func(t *testing.T) {
				s, name := offloadSwitch(t, d, c.budget, nil)
				got, calls := switchPasses(t, s, compute(d), inputs)
				sameOutputs(t, got, want, c.name)
				for i := range calls {
					if !maps.Equal(calls[i], wantCalls[i]) {
						t.Fatalf("pass %d routed differently", i)
					}
				}
				plan, err := offload.GetOffloadManager(name).Plan()
				if err != nil {
					t.Fatal(err)
				}
				if c.poolSlots > 0 && plan.PoolSlots != c.poolSlots {
					t.Errorf("plan has %d pool slots, want %d:\n%v", plan.PoolSlots, c.poolSlots, plan)
				}
				if plan.PoolSlots < 1 {
					t.Fatalf("budget %d streams no expert:\n%v", c.budget, plan)
				}
				usage, err := offload.GetGPUMemoryUsage(name)
				if err != nil {
					t.Fatal(err)
				}
				if usage.TotalBytes > c.budget || usage.TotalBytes != plan.PeakBytes {
					t.Errorf("engine holds %d bytes; budget %d, plan peak %d", usage.TotalBytes, c.budget, plan.PeakBytes)
				}
				// The cache's counts are the model's calls in INFERENCE.
				var inf int64
				for _, c := range calls[3:] {
					for _, n := range c {
						inf += int64(n)
					}
				}
				st := offload.GetOffloadManager(name).PoolStats()
				if st.Calls != inf || st.Passes != len(inputs)-3 || st.ResidentCalls+st.Hits+st.Misses != st.Calls {
					t.Errorf("pool stats %+v; the model made %d announced calls in %d INFERENCE passes", st, inf, len(inputs)-3)
				}
				if st.Misses == 0 || st.CopiedBytes < st.Misses*expertBytes/2 {
					t.Errorf("pool stats %+v: streamed experts but nothing copied", st)
				}
				rep, err := offload.CollectOffloadTiming(name)
				if err != nil || rep == nil {
					t.Fatalf("timing: %v %v", rep, err)
				}
				if len(rep.Announced) != 2 {
					t.Fatalf("timing report groups %+v, want experts and shared", rep.Announced)
				}
				var gCalls, gHits int64
				for _, g := range rep.Announced {
					gCalls += g.Calls
					gHits += g.Hits
				}
				if gCalls != st.Calls || gHits != st.ResidentCalls+st.Hits {
					t.Errorf("report: %d calls, %d hits; pool stats %+v", gCalls, gHits, st)
				}
				table := offload.FormatOffloadTimingTable(rep)
				t.Logf("budget %d:\n%v%s", c.budget, plan, table)
				for _, w := range []string{"announced layers.*.moe.experts.*:", "hit rate", "expert cache:"} {
					if !strings.Contains(table, w) {
						t.Errorf("timing table lacks %q:\n%s", w, table)
					}
				}
				if ps := offload.PipelineStateOf(name); ps.Failed != nil {
					t.Fatalf("engine failed: %v", ps.Failed)
				}
			})
		}
	})
}

// plainSwitch is the Switch run without the engine on the CPU: the
// reference outputs and each pass's calls.
func plainSwitch(t *testing.T, inputs [][]int32) ([][]float32, []map[string]int) {
	t.Helper()
	s := hostSwitch(t)
	b, err := kernels.NewCPUBackend(s.Norm.Weight.Peek().Device())
	if err != nil {
		t.Fatal(err)
	}
	return switchPasses(t, s, b, inputs)
}

// switchBudgets are the footprint's budgets: one ring and one pool slot,
// and half the units' bytes.
func switchBudgets(t *testing.T) (poolOfOne, half int64) {
	t.Helper()
	fp, err := offload.Measure(hostSwitch(t), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var attn, expert int64
	for i, n := range fp.UnitNames {
		if strings.HasSuffix(n, ".attn") {
			attn = max(attn, fp.UnitBytes[i])
		} else {
			expert = max(expert, fp.UnitBytes[i])
		}
	}
	return fp.FixedBytes + attn + expert, fp.FixedBytes + (fp.TotalBytes-fp.FixedBytes)/2
}

// TestAnnouncementsAreAdvisory: what a forward announces need not be what
// it calls. Announcing every expert of the layer (most never run: their
// copies are wasted, and the slots they hold must be freed at the pass's
// end), announcing in reverse order (the one slot of a pool of one is
// taken by the last announced expert while the first must run: it is
// taken back), and announcing only the first expert (the others are
// copied on entry) all give the resident outputs, pass after pass.
func TestAnnouncementsAreAdvisory(t *testing.T) {
	inputs := switchInputs(16, 2)
	want, _ := plainSwitch(t, inputs)
	poolOfOne, half := switchBudgets(t)
	for _, a := range []struct {
		name     string
		announce func(layer int, next []nn.Module) []nn.Module
	}{
		{"superset", nil}, // set below: needs the model
		{"reversed", func(_ int, next []nn.Module) []nn.Module {
			r := slices.Clone(next)
			slices.Reverse(r)
			return r
		}},
		{"first-only", func(_ int, next []nn.Module) []nn.Module { return next[:min(len(next), 1)] }},
	} {
		for _, budget := range []int64{poolOfOne, half} {
			t.Run(fmt.Sprintf("%s-%d", a.name, budget), func(t *testing.T) {
				d := devtest.NewCPU(t)
				s, name := offloadSwitch(t, d, budget, nil)
				s.announce = a.announce
				if a.announce == nil {
					s.announce = func(layer int, _ []nn.Module) []nn.Module {
						var all []nn.Module
						for _, e := range s.Layers[layer].MoE.Experts {
							all = append(all, e)
						}
						return all
					}
				}
				got, _ := switchPasses(t, s, compute(d), inputs)
				sameOutputs(t, got, want, a.name)
				st := offload.GetOffloadManager(name).PoolStats()
				if a.name == "superset" && st.Copies <= st.Misses {
					t.Errorf("announcing every expert wasted no copy: %+v", st)
				}
				if a.name == "first-only" && st.Copies != st.Misses {
					t.Errorf("with only the first announced every copy is for an entry: %+v", st)
				}
			})
		}
	}
}

// TestAnnouncedUnitFailureLeavesEngineUsable: an expert's forward returns
// an error, or panics, in INFERENCE while other experts' copies are in
// flight; the pass fails (the panic reaches the caller), and the next
// passes are correct and fail nothing, at a pool of one slot and a larger
// pool.
func TestAnnouncedUnitFailureLeavesEngineUsable(t *testing.T) {
	inputs := switchInputs(12, 3)
	want, wantCalls := plainSwitch(t, inputs)
	poolOfOne, half := switchBudgets(t)
	for _, panics := range []bool{false, true} {
		for _, budget := range []int64{poolOfOne, half} {
			t.Run(fmt.Sprintf("panic=%v-%d", panics, budget), func(t *testing.T) {
				d := devtest.NewCPU(t)
				s, name := offloadSwitch(t, d, budget, nil)
				b := compute(d)
				got, _ := switchPasses(t, s, b, inputs[:5])
				sameOutputs(t, got, want[:5], "before")
				// Fail in the last expert layer 1 calls in pass 5.
				var victim string
				for n := range wantCalls[5] {
					if strings.HasPrefix(n, "layers.1.moe.experts.") && n > victim {
						victim = n
					}
				}
				s.failIn, s.failPanic = victim, panics
				var err error
				var recovered any
				func() {
					defer func() { recovered = recover() }()
					_, err = s.Forward(b, inputs[5])
				}()
				if panics && recovered == nil || !panics && !errors.Is(err, errExpert) {
					t.Fatalf("the failing pass returned %v, recovered %v", err, recovered)
				}
				if ps := offload.PipelineStateOf(name); ps.Failed != nil || ps.InForward || ps.Active != "" {
					t.Fatalf("after the failed pass: %+v", ps)
				}
				got, _ = switchPasses(t, s, b, inputs[5:])
				sameOutputs(t, got, want[5:], "after")
			})
		}
	}
}

// TestAnnouncedSuspendedProfiling: a pass run while profiling is suspended
// routes to experts the recorded passes never call; it widens nothing: the
// plan's calls per pass are the recorded passes' (exact means), experts
// only the suspended pass called have none, the suspended pass does not
// count towards the profiling passes, and the most units announced
// together counts the recorded passes only.
func TestAnnouncedSuspendedProfiling(t *testing.T) {
	// A discovery pass, the suspended one (5 tokens) and two recorded ones
	// (1 token): find inputs where the suspended pass calls an expert that
	// neither recorded pass does.
	var inputs [][]int32
	var calls []map[string]int
	for seed := uint64(1); ; seed++ {
		if seed > 50 {
			t.Fatal("no inputs where the suspended pass reaches an expert the recorded ones do not")
		}
		rng := rand.New(rand.NewPCG(seed, 4))
		ids := func(n int) []int32 {
			out := make([]int32, n)
			for i := range out {
				out[i] = int32(rng.IntN(switchVocab))
			}
			return out
		}
		inputs = [][]int32{ids(2), ids(5), ids(1), ids(1)}
		_, calls = plainSwitch(t, inputs)
		only := false
		for n := range calls[1] {
			only = only || calls[2][n] == 0 && calls[3][n] == 0 && strings.Contains(n, "experts")
		}
		if only {
			break
		}
	}
	d := devtest.NewCPU(t)
	_, half := switchBudgets(t)
	s, name := offloadSwitch(t, d, half, nil)
	m := offload.GetOffloadManager(name)
	b := compute(d)
	if _, err := s.Forward(b, inputs[0]); err != nil {
		t.Fatal(err)
	}
	m.SuspendProfiling()
	if _, err := s.Forward(b, inputs[1]); err != nil {
		t.Fatal(err)
	}
	if err := m.ResumeProfiling(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Forward(b, inputs[2]); err != nil {
		t.Fatal(err)
	}
	if m.Phase() != offload.PhaseProfiling {
		t.Fatalf("after one recorded profiling pass: %v (the suspended pass counted)", m.Phase())
	}
	if _, err := s.Forward(b, inputs[3]); err != nil {
		t.Fatal(err)
	}
	in, err := m.PlanInput()
	if err != nil {
		t.Fatal(err)
	}
	maxAnn := 0
	for _, p := range []int{0, 2, 3} {
		for l := 0; l < swLayers; l++ {
			n := 0
			for e := 0; e < swExperts; e++ {
				if calls[p][fmt.Sprintf("layers.%d.moe.experts.%d", l, e)] > 0 {
					n++
				}
			}
			maxAnn = max(maxAnn, n)
		}
	}
	if in.MaxAnnounced != maxAnn {
		t.Errorf("MaxAnnounced %d, want %d (the recorded passes')", in.MaxAnnounced, maxAnn)
	}
	for _, u := range in.Units {
		isAnn := !strings.HasSuffix(u.Name, ".attn")
		if u.Announced != isAnn {
			t.Errorf("unit %s: announced %v, want %v", u.Name, u.Announced, isAnn)
		}
		if !isAnn {
			continue
		}
		c2, c3 := calls[2][u.Name], calls[3][u.Name]
		if want := float64(c2+c3) / 2; u.Calls != want {
			t.Errorf("unit %s: %v calls per pass, want %v (suspended pass: %d calls)", u.Name, u.Calls, want, calls[1][u.Name])
		}
		share := 0.0
		for _, c := range []int{c2, c3} {
			if c > 0 {
				share += 0.5
			}
		}
		if u.RunShare != share {
			t.Errorf("unit %s: runs in %v of passes, want %v", u.Name, u.RunShare, share)
		}
	}
}

// TestAnnouncedProfileRoundTrip: a profile saves the announced units,
// their calls per pass and the pool; a fresh model offloaded from it goes
// straight to INFERENCE with the same plan input and pool, and computes
// the resident outputs from its first pass. A profile whose pool does not
// fit its plan is refused.
func TestAnnouncedProfileRoundTrip(t *testing.T) {
	inputs := switchInputs(10, 5)
	want, _ := plainSwitch(t, inputs)
	_, half := switchBudgets(t)
	d := devtest.NewCPU(t)
	s, name := offloadSwitch(t, d, half, nil)
	got, _ := switchPasses(t, s, compute(d), inputs)
	sameOutputs(t, got, want, "profiled")
	m := offload.GetOffloadManager(name)
	in, _ := m.PlanInput()
	plan, _ := m.Plan()
	dir := t.TempDir()
	if err := m.SaveProfile(dir); err != nil {
		t.Fatal(err)
	}
	st, err := offload.ReadProfile(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Plan.PoolSlots != plan.PoolSlots || st.Plan.PoolSlotBytes != plan.PoolSlotBytes || st.MaxAnnounced != in.MaxAnnounced || plan.PoolSlots < 1 {
		t.Errorf("profile pool %d×%d, max announced %d; plan %d×%d, %d", st.Plan.PoolSlots, st.Plan.PoolSlotBytes, st.MaxAnnounced,
			plan.PoolSlots, plan.PoolSlotBytes, in.MaxAnnounced)
	}
	for i, u := range st.Units {
		if u.Announced != in.Units[i].Announced || u.CallsPerPass != in.Units[i].Calls {
			t.Errorf("profile unit %s: announced %v, %v calls; plan input %v, %v", u.Name, u.Announced, u.CallsPerPass, in.Units[i].Announced, in.Units[i].Calls)
		}
	}
	if err := offload.Release(name, true); err != nil {
		t.Fatal(err)
	}

	s2 := hostSwitch(t)
	name2 := uniqueName(t)
	cfg := offload.DefaultConfig(d.Dev)
	if err := offload.OffloadFromProfile(s2, dir, &cfg, name2); err != nil {
		t.Fatal(err)
	}
	defer offload.Release(name2, true)
	m2 := offload.GetOffloadManager(name2)
	if m2.Phase() != offload.PhaseInference {
		t.Fatalf("from the profile: %v", m2.Phase())
	}
	in2, _ := m2.PlanInput()
	plan2, _ := m2.Plan()
	if !slices.Equal(in2.Units, in.Units) || in2.MaxAnnounced != in.MaxAnnounced || plan2.PoolSlots != plan.PoolSlots || !slices.Equal(plan2.Resident, plan.Resident) {
		t.Errorf("adopted plan input or plan differ from the profiled ones:\n%v\n%v", plan2, plan)
	}
	got, _ = switchPasses(t, s2, compute(d), inputs)
	sameOutputs(t, got, want, "from the profile")
	if st := m2.PoolStats(); st.Calls == 0 || st.Misses == 0 {
		t.Errorf("pool stats from the profile %+v", st)
	}

	bad := *st
	bad.Plan.PoolSlots = 0
	if err := bad.Validate(s2); err == nil || !strings.Contains(err.Error(), "pool slots") {
		t.Errorf("a profile streaming experts with no pool slot: %v", err)
	}
}

// TestModelUnits: with no Include the engine takes the model's own units
// (UnitSelector), else each "model.layers.*"; an Include given wins. With
// each whole MoE block a unit (Include "layers.*.attn", "layers.*.moe"),
// the experts the blocks announce are inside units, not units: the
// announcements are ignored and the blocks stream through the ring as
// dense units (every expert copied every pass), every pass equal to the
// resident run.
func TestModelUnits(t *testing.T) {
	s := hostSwitch(t)
	if in, ex := offload.ModelUnits(s); !slices.Equal(in, []string{"layers.*.attn", "layers.*.moe.experts.*", "layers.*.moe.shared"}) || ex != nil {
		t.Errorf("ModelUnits(Switch) = %q, %q", in, ex)
	}
	tower, err := NewTower(s.Norm.Weight.Peek().Device(), 2, 8, 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, p := range nn.Parameters(tower) {
			p.Peek().Buffer().Free()
		}
	}()
	if in, _ := offload.ModelUnits(tower); !slices.Equal(in, offload.DefaultInclude) {
		t.Errorf("ModelUnits(Tower) = %q, want the default %q", in, offload.DefaultInclude)
	}
	include := []string{"layers.*.attn", "layers.*.moe"}
	fp, err := offload.Measure(s, include, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(fp.UnitNames) != 2*swLayers {
		t.Fatalf("include %q: units %v", include, fp.UnitNames)
	}
	inputs := switchInputs(10, 6)
	want, _ := plainSwitch(t, inputs)
	d := devtest.NewCPU(t)
	s2, name := offloadSwitch(t, d, fp.MinBudget(2), func(c *offload.Config) { c.Include = include })
	got, _ := switchPasses(t, s2, compute(d), inputs)
	sameOutputs(t, got, want, "whole layers as units")
	for _, u := range offload.OffloadUnits(name) {
		if !strings.HasSuffix(u.Name, ".moe") && !strings.HasSuffix(u.Name, ".attn") {
			t.Errorf("streamed unit %s", u.Name)
		}
	}
	if n := len(offload.OffloadUnits(name)); n < swLayers {
		t.Errorf("%d streamed units at the smallest budget, want every MoE block at least", n)
	}
	if plan, _ := offload.GetOffloadManager(name).Plan(); plan.PoolSlots != 0 {
		t.Errorf("no announced units, yet the plan has a pool:\n%v", plan)
	}
}

// TestAnnouncedStrategyReplan: a strategy replan re-measures the units'
// compute per call (an expert run several times a pass counts each run)
// and their calls per pass (the frequencies of the workload now running),
// and rebuilds or keeps the plan; either way the passes during and after
// it equal the resident run, and the engine has not failed.
func TestAnnouncedStrategyReplan(t *testing.T) {
	inputs := switchInputs(20, 8)
	want, wantCalls := plainSwitch(t, inputs)
	poolOfOne, half := switchBudgets(t)
	for _, budget := range []int64{poolOfOne, half} {
		t.Run(fmt.Sprint(budget), func(t *testing.T) {
			d := devtest.NewCPU(t)
			s, name := offloadSwitch(t, d, budget, nil)
			b := compute(d)
			got, _ := switchPasses(t, s, b, inputs[:4])
			sameOutputs(t, got, want[:4], "before")
			if _, err := offload.RequestStrategyReplan(name, false); err != nil {
				t.Fatal(err)
			}
			got, _ = switchPasses(t, s, b, inputs[4:])
			sameOutputs(t, got, want[4:], "during and after the replan")
			st := offload.GetStrategyReplanStatus(name)
			if st.State != offload.ReplanDone || st.Applied == nil {
				t.Fatalf("replan status %+v", st)
			}
			if ps := offload.PipelineStateOf(name); ps.Failed != nil {
				t.Fatal(ps.Failed)
			}
			in, _ := offload.GetOffloadManager(name).PlanInput()
			// Requested after pass 3: pass 4 warms up, 5 and 6 are measured.
			for _, u := range in.Units {
				if !u.Announced {
					continue
				}
				if want := float64(wantCalls[5][u.Name]+wantCalls[6][u.Name]) / 2; u.Calls != want {
					t.Errorf("after the replan %s has %v calls per pass, want %v (the measured passes')", u.Name, u.Calls, want)
				}
			}
			plan, _ := offload.GetOffloadManager(name).Plan()
			if sec, ok := offload.PredictPlan(in, plan); !ok || sec != plan.PredictedSec && !*st.Applied {
				t.Errorf("the plan in force: PredictPlan %v %v, predicted %v", sec, ok, plan.PredictedSec)
			}
		})
	}
}

// TestAnnouncedPlanReplace: the engine moves between plans with different
// pools and resident experts (as a replan or a token-count switch does):
// from half the weights to one pool slot and back to everything resident;
// the passes after each move equal the resident run and the engine holds
// what the plan says.
func TestAnnouncedPlanReplace(t *testing.T) {
	inputs := switchInputs(18, 9)
	want, _ := plainSwitch(t, inputs)
	poolOfOne, half := switchBudgets(t)
	d := devtest.NewCPU(t)
	s, name := offloadSwitch(t, d, half, nil)
	m := offload.GetOffloadManager(name)
	b := compute(d)
	got, _ := switchPasses(t, s, b, inputs[:6])
	sameOutputs(t, got, want[:6], "half")
	in, _ := m.PlanInput()
	for i, budget := range []int64{poolOfOne, in.FixedBytes + 1<<30} {
		in.Budget = budget
		p, err := offload.MakePlan(in)
		if err != nil {
			t.Fatal(err)
		}
		if err := offload.ReplacePlan(name, p); err != nil {
			t.Fatal(err)
		}
		got, _ := switchPasses(t, s, b, inputs[6+6*i:12+6*i])
		sameOutputs(t, got, want[6+6*i:12+6*i], fmt.Sprintf("after moving to budget %d", budget))
		usage, _ := offload.GetGPUMemoryUsage(name)
		if usage.TotalBytes != p.PeakBytes {
			t.Errorf("budget %d: engine holds %d bytes, plan %d", budget, usage.TotalBytes, p.PeakBytes)
		}
	}
}

// TestFailedStagedPassMarksNothing: a dense model's forward that fails
// half-way through a DISCOVERY or PROFILING pass (the first blocks ran,
// the rest did not) does not make any unit data-dependent: the blocks keep
// the cyclic ring, and the plan has no pool.
func TestFailedStagedPassMarksNothing(t *testing.T) {
	for _, before := range []int{0, 1} { // the panic in DISCOVERY, in PROFILING
		t.Run(fmt.Sprint(before), func(t *testing.T) {
			const depth, dim, hidden = 6, 32, 64
			host, dev := runtime.NewCPU(0), runtime.NewCPU(0)
			tower, err := NewTower(host, depth, dim, hidden, 7)
			if err != nil {
				t.Fatal(err)
			}
			name := uniqueName(t)
			cfg := offload.DefaultConfig(dev)
			cfg.Include = []string{"blocks.*"}
			cfg.GPUBudget = offload.Budget{Bytes: 256 + 3*3*dim*hidden*4}
			if err := offload.Offload(tower, &cfg, name); err != nil {
				t.Fatal(err)
			}
			defer offload.Release(name, true)
			gk, _ := kernels.NewCPUBackend(dev)
			pb := &panicBackend{Backend: gk}
			pb.armed.Store(-1)
			xs, _ := runtime.NewTensor(dev, runtime.F32, runtime.Shape{2, dim}, "x")
			defer xs.Buffer().Free()
			good := func() {
				t.Helper()
				if _, err, p := pb.forward(tower, xs); err != nil || p != nil {
					t.Fatalf("forward: %v %v", err, p)
				}
			}
			for i := 0; i < before; i++ {
				good()
			}
			pb.armed.Store(3)
			if _, _, p := pb.forward(tower, xs); p == nil {
				t.Fatal("the armed forward did not panic")
			}
			for offload.GetOffloadManager(name).Phase() != offload.PhaseInference {
				good()
			}
			in, _ := offload.GetOffloadManager(name).PlanInput()
			for _, u := range in.Units {
				if u.Announced {
					t.Errorf("unit %s is data-dependent after a failed pass", u.Name)
				}
			}
			if plan, _ := offload.GetOffloadManager(name).Plan(); plan.PoolSlots != 0 {
				t.Errorf("a dense model's plan has a pool:\n%v", plan)
			}
			good()
		})
	}
}

// TestPreflightFloorCustomUnits: with an Include that makes units below or
// beside the experts of an announcing block (nn.ChildAnnouncer) — the
// router a unit, or each expert's Linears — Offload's pre-flight floor is
// the floor of the plan made after profiling: the engine counts every unit
// under a block that announces as data-dependent, before any pass
// (leastPlan) as after profiling (markAnnounced), not only the modules the
// block names to nn.Announce. At that floor Offload passes and the passes
// equal the resident model's; one byte less is refused with ErrBudget.
func TestPreflightFloorCustomUnits(t *testing.T) {
	inputs := switchInputs(8, 3)
	want, _ := plainSwitch(t, inputs)
	for _, c := range []struct {
		name    string
		include []string
	}{
		{"router", []string{"layers.*.attn", "layers.*.moe.router", "layers.*.moe.experts.*", "layers.*.moe.shared"}},
		{"expert linears", []string{"layers.*.attn", "layers.*.moe.experts.*.*", "layers.*.moe.shared"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := devtest.NewCPU(t)
			announcing := func() *Switch {
				s := hostSwitch(t)
				for _, l := range s.Layers {
					l.MoE.announcer = true
				}
				return s
			}
			// A probe at half the model: streaming, the engine keeps the
			// same non-unit weights on the device as at the floor (the
			// embedding table in mapped host memory).
			fp, err := offload.Measure(hostSwitch(t), c.include, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, probeName := offloadThis(t, announcing(), d, fp.TotalBytes/2, func(cfg *offload.Config) { cfg.Include = c.include })
			floor, err := offload.PreflightFloor(probeName)
			if err != nil {
				t.Fatal(err)
			}
			if err := offload.Release(probeName, true); err != nil {
				t.Fatal(err)
			}
			cfg := offload.DefaultConfig(d.Dev)
			cfg.Include, cfg.GPUBudget = c.include, offload.Budget{Bytes: floor - 1}
			below := uniqueName(t)
			if err := offload.Offload(announcing(), &cfg, below); !errors.Is(err, offload.ErrBudget) {
				if err == nil {
					offload.Release(below, true)
				}
				t.Fatalf("one byte below the pre-flight floor %d: %v; want ErrBudget", floor, err)
			}
			s, name := offloadThis(t, announcing(), d, floor, func(cfg *offload.Config) { cfg.Include = c.include })
			got, _ := switchPasses(t, s, compute(d), inputs)
			sameOutputs(t, got, want, c.name+" units at the pre-flight floor")
			m := offload.GetOffloadManager(name)
			in, err := m.PlanInput()
			if err != nil {
				t.Fatal(err)
			}
			if pf := offload.PlannerFloor(in); pf != floor {
				t.Errorf("the planner's floor after profiling %d bytes; the pre-flight floor %d", pf, floor)
			}
			for _, u := range in.Units {
				if under := strings.Contains(u.Name, ".moe."); u.Announced != under {
					t.Errorf("unit %s: announced %v, want %v (every unit under the announcing block)", u.Name, u.Announced, under)
				}
			}
		})
	}
}
