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
}

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
		for _, l := range s.Layers {
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
	host := runtime.NewCPU(0)
	t.Cleanup(func() {
		if err := host.Close(); err != nil {
			t.Errorf("host device: %v", err)
		}
	})
	s, err := NewSwitch(host, swLayers, swExperts, swTopK, swDim, swHidden, swSeed)
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
	s := hostSwitch(t)
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
