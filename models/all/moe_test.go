package all_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/models"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// moeFixtures are the mixture-of-experts checkpoints (transformers 5.17,
// the Hub's per-expert tensor layout).
var moeFixtures = []struct{ dir, family string }{
	{"../../testdata/tiny-mixtral", "mixtral"},
	{"../../testdata/tiny-qwen3moe", "qwen3_moe"},
}

// moeV4Dialect is v4Dialect for an MoE fixture: Qwen3-MoE's expert count
// under transformers 4's key, num_experts.
func moeV4Dialect(t *testing.T, dir string) string {
	t.Helper()
	out := v4Dialect(t, dir)
	p := filepath.Join(out, "config.json")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	if c["model_type"] == "qwen3_moe" {
		c["num_experts"] = c["num_local_experts"]
		delete(c, "num_local_experts")
	}
	if data, err = json.MarshalIndent(c, "", "  "); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMoEGolden: both MoE fixtures, in both config.json dialects, give
// transformers' logits within 1e-3 at every position of both prompts and at
// the 40-token prompt's last, and its 24-token greedy continuation, op by
// op and through Generate's step path alike.
func TestMoEGolden(t *testing.T) {
	checkGolden(t, moeFixtures, moeV4Dialect)
}

// TestMoEKnobs: each fixture's model has its family's expert layout, named
// as the checkpoint names it.
func TestMoEKnobs(t *testing.T) {
	dev, _ := cpu(t)
	for _, c := range []struct {
		dir, router, expert0 string
		experts, topK, width int
		qk                   bool
	}{
		{moeFixtures[0].dir, "model.layers.2.block_sparse_moe.gate", "model.layers.2.block_sparse_moe.experts.7.w1", 8, 2, 96, false},
		{moeFixtures[1].dir, "model.layers.2.mlp.gate", "model.layers.2.mlp.experts.15.gate_proj", 16, 4, 32, true},
	} {
		m := load(t, c.dir, dev)
		l := m.Layers[2]
		if l.MoE == nil || l.MLP != nil {
			t.Fatalf("%s: layer 2 is not sparse", c.dir)
		}
		blk := l.MoE
		last := blk.Experts[len(blk.Experts)-1]
		if got := [...]any{blk.Router.Node().Name(), last.Gate.Node().Name(), len(blk.Experts), blk.TopK, last.Gate.Out, blk.NormTopK, l.Attn.QNorm != nil}; got != [...]any{c.router, c.expert0, c.experts, c.topK, c.width, true, c.qk} {
			t.Errorf("%s: router, last expert's gate, experts, top-k, width, renormalised, q/k norm = %v", c.dir, got)
		}
		if s := m.Cfg.Summary(); !strings.Contains(s, "experts") {
			t.Errorf("summary %q does not mention the experts", s)
		}
	}
}

// TestMoEBatchEqualsAlone: sequences of mixed lengths through ForwardBatch
// (tokens of several sequences routed together, the union of their
// experts run once) give each sequence's logits alone within 1e-5.
func TestMoEBatchEqualsAlone(t *testing.T) {
	for _, fx := range moeFixtures {
		t.Run(fx.family, func(t *testing.T) {
			dev, b := cpu(t)
			m := load(t, fx.dir, dev)
			ps := plans(m.Cfg.VocabSize)
			want := runAlone(t, m, b, ps)
			cache, err := m.NewPagedCache(b, 64, 4)
			if err != nil {
				t.Fatal(err)
			}
			defer cache.Close()
			checkBatched(t, runBatched(t, m, b, cache, ps), want)
		})
	}
}

// expertSpy is a hook that records, per expert block forward, the experts
// announced and the experts entered.
type expertSpy struct {
	announced, entered [][]string
}

func (s *expertSpy) Enter(m nn.Module) error {
	switch m.(type) {
	case *decoder.MoEBlock:
		s.entered = append(s.entered, nil)
	case *decoder.MLP:
		if strings.Contains(m.Node().Name(), ".experts.") {
			s.entered[len(s.entered)-1] = append(s.entered[len(s.entered)-1], m.Node().Name())
		}
	}
	return nil
}

func (s *expertSpy) Exit(_ nn.Module, err error) error { return err }

func (s *expertSpy) Announce(parent nn.Module, next []nn.Module) {
	var names []string
	for _, m := range next {
		names = append(names, m.Node().Name())
	}
	s.announced = append(s.announced, names)
}

// TestMoEHooksSeeExperts: with a hook installed, each expert block
// announces the experts it runs, in the order it runs them (ascending
// index), then each runs through its own nn.Call; a one-token forward runs
// exactly top-k experts, a prefill at least that many; and the logits are
// those without the hook.
func TestMoEHooksSeeExperts(t *testing.T) {
	for _, fx := range moeFixtures {
		t.Run(fx.family, func(t *testing.T) {
			dev, b := cpu(t)
			m := load(t, fx.dir, dev)
			ref := readReference(t, fx.dir)
			want := testmodel.Run(t, m, b, ref.GreedyPrompt, 3)
			spy := &expertSpy{}
			remove := m.Node().Tree().AddHook(spy)
			got := testmodel.Run(t, m, b, ref.GreedyPrompt, 3)
			remove()
			for i := range want {
				if !slices.Equal(got[i], want[i]) {
					t.Fatalf("forward %d: logits with the hook differ by %.3g", i, maxDiff(got[i], want[i]))
				}
			}
			L, k := len(m.Layers), m.Cfg.MoE.TopK
			if len(spy.entered) != 4*L || !reflect.DeepEqual(spy.announced, spy.entered) {
				t.Fatalf("%d block forwards (want %d); announced %v\nentered %v", len(spy.entered), 4*L, spy.announced, spy.entered)
			}
			for i, names := range spy.entered {
				if !slices.IsSortedFunc(names, func(a, b string) int { return expertIndex(a) - expertIndex(b) }) {
					t.Errorf("block forward %d: experts %v not in ascending order", i, names)
				}
				if decode := i >= L; decode && len(names) != k || !decode && len(names) < k {
					t.Errorf("block forward %d: %d experts ran (top-%d)", i, len(names), k)
				}
			}
		})
	}
}

func expertIndex(name string) int {
	i := strings.LastIndex(name, ".")
	n := 0
	for _, c := range name[i+1:] {
		n = n*10 + int(c-'0')
	}
	return n
}

// rewriteWeights copies the checkpoint in dir (config.json edited: each
// pair old → new replaced once) with its tensors passed through edit (which
// drops a tensor by returning false).
func rewriteWeights(t *testing.T, dir string, edit func(*loader.NamedTensor) bool, edits ...string) string {
	t.Helper()
	out := checkpointWith(t, dir, dir, edits...)
	if err := os.Remove(filepath.Join(out, "model.safetensors")); err != nil {
		t.Fatal(err)
	}
	ck, err := loader.OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	var ts []loader.NamedTensor
	for _, n := range ck.Names() {
		info, err := ck.Info(n)
		if err != nil {
			t.Fatal(err)
		}
		data, err := ck.Bytes(n)
		if err != nil {
			t.Fatal(err)
		}
		nt := loader.NamedTensor{Name: n, DType: info.DType, Shape: info.Shape, Data: slices.Clone(data)}
		if edit(&nt) {
			ts = append(ts, nt)
		}
	}
	if err := loader.WriteFile(filepath.Join(out, "model.safetensors"), ts, nil); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMoEBadInput: a missing expert tensor, a router of the wrong shape, a
// top-k above the expert count, a dense layer that does not exist and
// disagreeing expert counts are errors naming what is wrong.
func TestMoEBadInput(t *testing.T) {
	mixtral, qwen := moeFixtures[0].dir, moeFixtures[1].dir
	keep := func(*loader.NamedTensor) bool { return true }
	for _, c := range []struct {
		name string
		dir  func(t *testing.T) string
		want []string
	}{
		{"expert tensor missing", func(t *testing.T) string {
			return rewriteWeights(t, mixtral, func(n *loader.NamedTensor) bool {
				return n.Name != "model.layers.1.block_sparse_moe.experts.5.w2.weight"
			})
		}, []string{"1 tensor that the config", "is missing", "model.layers.1.block_sparse_moe.experts.5.w2.weight"}},
		{"router of the wrong shape", func(t *testing.T) string {
			return rewriteWeights(t, qwen, func(n *loader.NamedTensor) bool {
				if n.Name == "model.layers.0.mlp.gate.weight" { // [16, 64] → [8, 64]
					n.Shape, n.Data = []int{8, 64}, n.Data[:len(n.Data)/2]
				}
				return true
			})
		}, []string{"model.layers.0.mlp.gate.weight", "[8 64]", "[16 64]"}},
		{"top-k above the experts", func(t *testing.T) string {
			return rewriteWeights(t, mixtral, keep, `"num_experts_per_tok": 2`, `"num_experts_per_tok": 9`)
		}, []string{"field num_experts_per_tok", "9 exceeds the 8 experts"}},
		{"top-k zero", func(t *testing.T) string {
			return rewriteWeights(t, qwen, keep, `"num_experts_per_tok": 4`, `"num_experts_per_tok": 0`)
		}, []string{"field num_experts_per_tok", "positive"}},
		{"mlp_only_layers out of range", func(t *testing.T) string {
			return rewriteWeights(t, qwen, keep, `"mlp_only_layers": []`, `"mlp_only_layers": [3]`)
		}, []string{"field mlp_only_layers", "layer 3 is outside 0..2"}},
		{"mlp_only_layers over sparse weights", func(t *testing.T) string {
			return rewriteWeights(t, qwen, keep, `"mlp_only_layers": []`, `"mlp_only_layers": [1]`)
		}, []string{"missing", "model.layers.1.mlp.down_proj.weight"}},
		{"expert counts disagree", func(t *testing.T) string {
			return rewriteWeights(t, qwen, keep, `"num_local_experts": 16`, `"num_local_experts": 16, "num_experts": 8`)
		}, []string{"field num_experts", "8 disagrees with num_local_experts 16"}},
		{"more experts than the weights", func(t *testing.T) string {
			return rewriteWeights(t, mixtral, keep, `"num_local_experts": 8`, `"num_local_experts": 9`)
		}, []string{"missing", "experts.8.w1.weight"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dev := runtime.NewCPU(0)
			defer dev.Close()
			m, ck, err := models.Load(c.dir(t), dev)
			if err == nil {
				m.Close()
				ck.Close()
				t.Fatalf("loaded; want an error containing %q", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if n := dev.Memory().InUse; n != 0 {
				t.Errorf("%d bytes left allocated after the error", n)
			}
		})
	}
}

// Published MoE config.json files (transformers 4 layout, as on the Hub).
const (
	qwen3_30bA3b = `{"architectures":["Qwen3MoeForCausalLM"],"attention_bias":false,"attention_dropout":0.0,"bos_token_id":151643,
"decoder_sparse_step":1,"eos_token_id":151645,"head_dim":128,"hidden_act":"silu","hidden_size":2048,"initializer_range":0.02,
"intermediate_size":6144,"max_position_embeddings":40960,"max_window_layers":48,"mlp_only_layers":[],"model_type":"qwen3_moe",
"moe_intermediate_size":768,"norm_topk_prob":true,"num_attention_heads":32,"num_experts":128,"num_experts_per_tok":8,
"num_hidden_layers":48,"num_key_value_heads":4,"output_router_logits":false,"rms_norm_eps":1e-06,"rope_scaling":null,
"rope_theta":1000000.0,"router_aux_loss_coef":0.001,"sliding_window":null,"tie_word_embeddings":false,"torch_dtype":"bfloat16",
"transformers_version":"4.51.0","use_cache":true,"use_sliding_window":false,"vocab_size":151936}`
	mixtral8x7B = `{"architectures":["MixtralForCausalLM"],"attention_dropout":0.0,"bos_token_id":1,"eos_token_id":2,"hidden_act":"silu",
"hidden_size":4096,"initializer_range":0.02,"intermediate_size":14336,"max_position_embeddings":32768,"model_type":"mixtral",
"num_attention_heads":32,"num_experts_per_tok":2,"num_hidden_layers":32,"num_key_value_heads":8,"num_local_experts":8,
"output_router_logits":false,"rms_norm_eps":1e-05,"rope_theta":1000000.0,"router_aux_loss_coef":0.02,"sliding_window":null,
"tie_word_embeddings":false,"torch_dtype":"bfloat16","transformers_version":"4.36.0.dev0","use_cache":true,"vocab_size":32000}`
)

// TestMoERealShapes: make-model's MoE shapes build the networks of the
// published configs, with the published parameter counts; the cut shapes
// differ only in depth.
func TestMoERealShapes(t *testing.T) {
	for _, c := range []struct {
		shape, published string
		params           int64
	}{
		{"qwen3-30b-a3b", qwen3_30bA3b, 30_532_122_624},
		{"mixtral-8x7b", mixtral8x7B, 46_702_792_704},
	} {
		t.Run(c.shape, func(t *testing.T) {
			_, data, err := models.ShapeConfig(c.shape, 0)
			if err != nil {
				t.Fatal(err)
			}
			ours, pub := build(t, data, c.shape), build(t, []byte(c.published), "published/config.json")
			if got := params(ours); got != c.params {
				t.Errorf("shape %s has %d parameters, want %d", c.shape, got, c.params)
			}
			if got := params(pub); got != c.params {
				t.Errorf("published config has %d parameters, want %d", got, c.params)
			}
			if !reflect.DeepEqual(ours.Cfg, pub.Cfg) {
				t.Errorf("shape %+v\npublished %+v", ours.Cfg, pub.Cfg)
			}
		})
	}
	for _, c := range []struct {
		cut, full string
		layers    int
	}{{"qwen3-30b-a3b-24l", "qwen3-30b-a3b", 24}, {"mixtral-8x7b-4l", "mixtral-8x7b", 4}} {
		_, cut, err := models.ShapeConfig(c.cut, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, full, err := models.ShapeConfig(c.full, c.layers)
		if err != nil {
			t.Fatal(err)
		}
		a, b := build(t, cut, c.cut).Cfg, build(t, full, c.full).Cfg
		if !reflect.DeepEqual(a, b) || a.NumHiddenLayers != c.layers {
			t.Errorf("%s is not %s cut to %d layers:\n %+v\n %+v", c.cut, c.full, c.layers, a, b)
		}
	}
}

// TestMoEMakeCheckpoint: the tiny MoE shapes write checkpoints that load
// and generate; Qwen3-MoE's has a dense layer (mlp_only_layers) named as
// Qwen3's MLP, between sparse ones.
func TestMoEMakeCheckpoint(t *testing.T) {
	for _, shape := range []string{"mixtral-tiny", "qwen3moe-tiny"} {
		t.Run(shape, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), shape)
			if err := models.MakeCheckpoint(dir, shape, 0, 7, 64<<10); err != nil {
				t.Fatal(err)
			}
			dev, b := cpu(t)
			m := load(t, dir, dev)
			out, err := m.Generate(b, []int32{3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, decoder.GenerateOptions{MaxNewTokens: 4, IgnoreEOS: true})
			if err != nil || len(out) != 4 {
				t.Fatalf("generate: %v, %v", out, err)
			}
			var sparse []bool
			for _, l := range m.Layers {
				sparse = append(sparse, l.MoE != nil)
			}
			want := []bool{true, true, true}
			if shape == "qwen3moe-tiny" {
				want[1] = false
				if _, ok := m.ParamShapes()["model.layers.1.mlp.down_proj.weight"]; !ok {
					t.Error("the dense layer has no mlp.down_proj")
				}
			}
			if !slices.Equal(sparse, want) {
				t.Errorf("sparse layers %v, want %v", sparse, want)
			}
		})
	}
	names := models.ShapeNames()
	for _, want := range []string{"qwen3-30b-a3b", "qwen3-30b-a3b-24l", "mixtral-8x7b-4l", "mixtral-tiny", "qwen3moe-tiny"} {
		if !slices.Contains(names, want) {
			t.Errorf("shape %s missing from %v", want, names)
		}
	}
}

// TestMoEDenseLayer: a Qwen3-MoE whose layer 1 is dense (mlp_only_layers)
// computes what the same model with a sparse layer 1 does when that
// layer's router is zero and its experts 0..3 all hold the dense MLP's
// weights: equal probabilities pick experts 0..3 (ties to the lower
// index), each weighted 1/4 after renormalisation, which sums to the dense
// MLP.
func TestMoEDenseLayer(t *testing.T) {
	qwen := moeFixtures[1].dir
	ck, err := loader.OpenCheckpoint(qwen)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	const l1 = "model.layers.1.mlp."
	expert0 := func(proj string) []byte {
		data, err := ck.Bytes(l1 + "experts.0." + proj + ".weight")
		if err != nil {
			t.Fatal(err)
		}
		return slices.Clone(data)
	}
	sparse := rewriteWeights(t, qwen, func(n *loader.NamedTensor) bool {
		rest, ok := strings.CutPrefix(n.Name, l1)
		switch {
		case !ok:
		case rest == "gate.weight":
			clear(n.Data)
		case strings.HasPrefix(rest, "experts.1.") || strings.HasPrefix(rest, "experts.2.") || strings.HasPrefix(rest, "experts.3."):
			n.Data = expert0(strings.TrimSuffix(rest[len("experts.1."):], ".weight"))
		}
		return true
	})
	dense := rewriteWeights(t, qwen, func(n *loader.NamedTensor) bool {
		rest, ok := strings.CutPrefix(n.Name, l1)
		if !ok {
			return true
		}
		if proj, ok := strings.CutPrefix(rest, "experts.0."); ok {
			n.Name = l1 + proj
			return true
		}
		return false
	}, `"mlp_only_layers": []`, `"mlp_only_layers": [1]`, `"intermediate_size": 160`, `"intermediate_size": 32`)
	dev, b := cpu(t)
	ms, md := load(t, sparse, dev), load(t, dense, dev)
	if md.Layers[1].MLP == nil || ms.Layers[1].MoE == nil {
		t.Fatal("layer 1 is not dense in the dense model, or not sparse in the other")
	}
	ids := []int32{5, 9, 200, 17, 33, 41, 2, 250}
	want, got := testmodel.Forward(t, ms, b, ids, true), testmodel.Forward(t, md, b, ids, true)
	if d := maxDiff(got, want); d > 1e-5 {
		t.Errorf("dense layer 1 differs from its sparse equivalent by %.3g", d)
	}
}
