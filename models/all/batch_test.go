package all_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/internal/testmodel"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/models/kvcache"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// batchFixtures are every family's tiny checkpoint.
var batchFixtures = []struct{ dir, family string }{
	{"../../testdata/tiny-llama", "llama"},
	{"../../testdata/tiny-qwen2", "qwen2"},
	{"../../testdata/tiny-qwen3", "qwen3"},
	{"../../testdata/tiny-mistral", "mistral"},
}

// seqPlan is one sequence of a batched run: its prompt, how many greedy
// decode steps follow the prefill, and the batch step it joins at.
type seqPlan struct {
	prompt []int32
	steps  int
	join   int
}

// plans are sequences of mixed lengths (one past Mistral's window of 8,
// one of a single token) finishing at different steps, two joining a batch
// already decoding (a forward that mixes prefills and decode steps).
func plans(vocab int) []seqPlan {
	prompt := func(n, seed int) []int32 { return planPrompt(n, seed, vocab) }
	return []seqPlan{
		{prompt(23, 1), 5, 0},
		{prompt(3, 2), 2, 0},
		{prompt(1, 3), 7, 0},
		{prompt(12, 4), 0, 0},
		{prompt(9, 5), 4, 2},
		{prompt(17, 6), 3, 3},
	}
}

// planPrompt is a prompt of n tokens below vocab, a different one for
// each seed.
func planPrompt(n, seed, vocab int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32((seed*131 + i*37 + 11) % vocab)
	}
	return p
}

// runAlone runs each plan's sequence alone through Forward on b (its
// prompt, then its greedy steps) and returns its logits per forward: what
// a batched run of ps must give.
func runAlone(t *testing.T, m *decoder.Model, b kernels.Backend, ps []seqPlan) [][][]float32 {
	t.Helper()
	want := make([][][]float32, len(ps))
	for i, p := range ps {
		want[i] = testmodel.Run(t, m, b, p.prompt, p.steps)
	}
	return want
}

// runBatched runs the plans through ForwardBatch, every active sequence in
// one forward per step, and returns each sequence's logits per forward
// (prefill, then each decode step). Sequences are freed as they finish.
// before, when given, is called ahead of each step's forward with the
// step and the sequences so far (nil: not joined yet).
func runBatched(t *testing.T, m *decoder.Model, b kernels.Backend, cache *kvcache.Paged, ps []seqPlan, before ...func(step int, seqs []*kvcache.Seq)) [][][]float32 {
	t.Helper()
	V := m.Cfg.VocabSize
	out := make([][][]float32, len(ps))
	seqs := make([]*kvcache.Seq, len(ps))
	next := make([]int32, len(ps))
	for step := 0; ; step++ {
		var entries []decoder.BatchEntry
		var who []int
		pending := false
		for i, p := range ps {
			switch {
			case p.join == step:
				seqs[i] = cache.NewSeq()
				entries, who = append(entries, decoder.BatchEntry{Seq: seqs[i], IDs: p.prompt}), append(who, i)
			case p.join < step && seqs[i] != nil && !seqs[i].Freed():
				entries, who = append(entries, decoder.BatchEntry{Seq: seqs[i], IDs: []int32{next[i]}}), append(who, i)
			case p.join > step:
				pending = true
			}
		}
		if len(entries) == 0 {
			if pending {
				continue
			}
			return out
		}
		for _, f := range before {
			f(step, seqs)
		}
		lt, err := m.ForwardBatch(b, cache, entries)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if lt.Dim(0) != len(entries) || lt.Dim(1) != V {
			t.Fatalf("step %d: logits %v for %d entries", step, lt.Shape(), len(entries))
		}
		all := make([]float32, lt.NumElements())
		if err := b.ReadF32(all, lt); err != nil {
			t.Fatal(err)
		}
		for j, i := range who {
			row := all[j*V : (j+1)*V]
			out[i] = append(out[i], row)
			next[i] = int32(kernels.Argmax(row))
			if len(out[i]) == ps[i].steps+1 {
				seqs[i].Free()
			}
		}
	}
}

// checkBatched compares a batched run with each sequence run alone:
// logits within 1e-5 at every forward, hence the same greedy tokens.
func checkBatched(t *testing.T, got, want [][][]float32) {
	t.Helper()
	for i := range want {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("sequence %d: %d forwards batched, %d alone", i, len(got[i]), len(want[i]))
		}
		for s := range want[i] {
			if d := maxDiff(got[i][s], want[i][s]); d > 1e-5 {
				t.Errorf("sequence %d forward %d: batched logits differ from the sequence alone by %.3g", i, s, d)
			}
			if g, w := kernels.Argmax(got[i][s]), kernels.Argmax(want[i][s]); g != w {
				t.Errorf("sequence %d forward %d: greedy token %d batched, %d alone", i, s, g, w)
			}
		}
	}
}

// plainBackend is a CPU backend without the paged attention capabilities:
// ForwardBatch gathers each sequence's keys and values and calls Attention.
type plainBackend struct{ kernels.Backend }

func (p plainBackend) AddBias(x, bias *runtime.Tensor) error {
	return p.Backend.(kernels.BiasAdder).AddBias(x, bias)
}

func (p plainBackend) AttentionWindow(out, q, kc, vc *runtime.Tensor, pos0, window int) error {
	return p.Backend.(kernels.WindowAttender).AttentionWindow(out, q, kc, vc, pos0, window)
}

// TestBatchEqualsAlone: for every family, sequences of mixed lengths run
// together through ForwardBatch (paged attention, and the gather fallback
// of a backend without it; blocks of 4 positions, so sequences span many)
// give the logits of each sequence run alone through Forward within 1e-5
// and the same greedy tokens, with sequences joining and finishing at
// different steps; every block is back in the pool at the end.
func TestBatchEqualsAlone(t *testing.T) {
	for _, fx := range batchFixtures {
		t.Run(fx.family, func(t *testing.T) {
			dev, b := cpu(t)
			m := load(t, fx.dir, dev)
			ps := plans(m.Cfg.VocabSize)
			want := runAlone(t, m, b, ps)
			for _, tc := range []struct {
				name string
				b    kernels.Backend
			}{{"paged", b}, {"gather", plainBackend{b}}} {
				t.Run(tc.name, func(t *testing.T) {
					cache, err := m.NewPagedCache(b, 64, 4)
					if err != nil {
						t.Fatal(err)
					}
					defer cache.Close()
					checkBatched(t, runBatched(t, m, tc.b, cache, ps), want)
					if cache.FreeBlocks() != cache.TotalBlocks() || cache.LiveSeqs() != 0 {
						t.Errorf("after the run: %d of %d blocks free, %d sequences live", cache.FreeBlocks(), cache.TotalBlocks(), cache.LiveSeqs())
					}
				})
			}
		})
	}
}

// TestBatchOffloaded: the batched run on a model offloaded onto a CPU
// compute device with a budget where layers stream gives the resident
// single-sequence logits within 1e-5.
func TestBatchOffloaded(t *testing.T) {
	for _, fx := range batchFixtures {
		t.Run(fx.family, func(t *testing.T) {
			host, hb := cpu(t)
			resident := load(t, fx.dir, host)
			ps := plans(resident.Cfg.VocabSize)
			want := runAlone(t, resident, hb, ps)
			unit, fixed, _ := unitBytes(t, resident)
			dev, cb := offloadDevice(t)
			defer dev.Close()
			m := load(t, fx.dir, host)
			name := fmt.Sprintf("%s-%s", t.Name(), fx.family)
			cfg := offload.DefaultConfig(dev)
			cfg.GPUBudget = offload.Budget{Bytes: fixed + 2*unit}
			cfg.TransferBlocks = 2
			cfg.OffloadTiming = offload.TimingEager
			_, release := offloadAs(t, m, &cfg, name)
			defer release()
			sb := strictBackend{cb, dev}
			cache, err := m.NewPagedCache(sb, 64, 4)
			if err != nil {
				t.Fatal(err)
			}
			defer cache.Close()
			checkBatched(t, runBatched(t, m, sb, cache, ps), want)
			if len(offload.OffloadUnits(name)) == 0 {
				t.Errorf("no layer streamed")
			}
			if cache.FreeBlocks() != cache.TotalBlocks() {
				t.Errorf("%d of %d blocks free after the run", cache.FreeBlocks(), cache.TotalBlocks())
			}
		})
	}
}

// TestBatchBadInput: an empty batch, an entry without tokens, a token
// outside the vocabulary, a sequence twice and a pool out of blocks are
// errors that change no sequence; the cache stays usable.
func TestBatchBadInput(t *testing.T) {
	dev, b := cpu(t)
	m := load(t, batchFixtures[0].dir, dev)
	cache, err := m.NewPagedCache(b, 3, 4) // 12 positions
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	s1, s2 := cache.NewSeq(), cache.NewSeq()
	V := int32(m.Cfg.VocabSize)
	for _, tc := range []struct {
		name    string
		entries []decoder.BatchEntry
		want    string
	}{
		{"empty", nil, "empty batch"},
		{"no tokens", []decoder.BatchEntry{{Seq: s1, IDs: []int32{1}}, {Seq: s2}}, "entry 1 has no tokens"},
		{"vocabulary", []decoder.BatchEntry{{Seq: s1, IDs: []int32{1, V}}}, fmt.Sprintf("token id %d at position 1", V)},
		{"twice", []decoder.BatchEntry{{Seq: s1, IDs: []int32{1}}, {Seq: s1, IDs: []int32{2}}}, "entries 0 and 1 are the same sequence"},
		{"out of blocks", []decoder.BatchEntry{{Seq: s1, IDs: make([]int32, 8)}, {Seq: s2, IDs: make([]int32, 5)}}, "entry 1 (0 cached + 5 new positions)"},
	} {
		_, err := m.ForwardBatch(b, cache, tc.entries)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
		if s1.Len() != 0 || s2.Len() != 0 {
			t.Fatalf("%s: a failed forward changed the sequences' lengths", tc.name)
		}
	}
	// The cache still serves: s1 kept the blocks it reserved, s2 gets one.
	if _, err := m.ForwardBatch(b, cache, []decoder.BatchEntry{{Seq: s1, IDs: make([]int32, 8)}, {Seq: s2, IDs: []int32{3}}}); err != nil {
		t.Fatal(err)
	}
	s1.Free()
	s2.Free()
	if cache.FreeBlocks() != 3 {
		t.Errorf("%d of 3 blocks free at the end", cache.FreeBlocks())
	}
	if _, err := m.ForwardBatch(b, cache, []decoder.BatchEntry{{Seq: s1, IDs: []int32{1}}}); err == nil || !strings.Contains(err.Error(), "not live") {
		t.Errorf("freed sequence: %v", err)
	}
}

// unitBytes is the most a layer's parameters take, what the parameters
// outside the layers take, and all layers', each parameter rounded up to 256
// bytes as the engine places them.
func unitBytes(t *testing.T, m *decoder.Model) (unit, fixed, total int64) {
	t.Helper()
	for _, l := range m.Layers {
		var n int64
		for _, p := range nn.Parameters(l) {
			n += (p.Peek().NumBytes() + 255) / 256 * 256
		}
		unit, total = max(unit, n), total+n
	}
	for _, p := range nn.Parameters(m) {
		if !strings.HasPrefix(p.Name(), "model.layers.") {
			fixed += (p.Peek().NumBytes() + 255) / 256 * 256
		}
	}
	return unit, fixed, total
}

// TestBatchEveryDevice: on every device (the GPU runs the paged decode,
// varlen prefill and batched RoPE kernels), each family's sequences of mixed
// lengths run together through ForwardBatch, joining and finishing at
// different steps, choose the greedy tokens each sequence chooses alone
// through Generate.
func TestBatchEveryDevice(t *testing.T) {
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		for _, fx := range batchFixtures {
			t.Run(fx.family, func(t *testing.T) {
				m := load(t, fx.dir, d.Dev)
				ps := plans(m.Cfg.VocabSize)
				cache, err := m.NewPagedCache(d.Backend, 64, 4)
				if err != nil {
					t.Fatal(err)
				}
				defer cache.Close()
				got := runBatched(t, m, d.Backend, cache, ps)
				for i, p := range ps {
					want, err := m.Generate(d.Backend, p.prompt, decoder.GenerateOptions{MaxNewTokens: p.steps + 1, IgnoreEOS: true})
					if err != nil {
						t.Fatal(err)
					}
					var toks []int32
					for _, row := range got[i] {
						toks = append(toks, int32(kernels.Argmax(row)))
					}
					if !slices.Equal(toks, want) {
						t.Errorf("sequence %d (prompt of %d): batched greedy tokens %v, alone %v", i, len(p.prompt), toks, want)
					}
				}
				if cache.FreeBlocks() != cache.TotalBlocks() {
					t.Errorf("%d of %d blocks free after the run", cache.FreeBlocks(), cache.TotalBlocks())
				}
			})
		}
	})
}
