package all_test

import (
	"encoding/json"
	"github.com/flextensor-go/flextensor/internal/testmodel"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/models"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// fp8Fixtures are the FP8 Llama checkpoints of make_fp8_fixtures.py in the
// Hub's two layouts, with float32 references computed by transformers from
// the dequantized weights (activations unquantized).
var fp8Fixtures = []struct{ dir, layout string }{
	{"../../testdata/tiny-llama-fp8-channel", "channel"},
	{"../../testdata/tiny-llama-fp8-block", "block"},
}

type fp8Reference struct {
	InputIDs           [][]int32     `json:"input_ids"`
	Logits             [][][]float32 `json:"logits_fp32_from_dequantized_fp8"`
	GreedyPrompt       []int32       `json:"greedy_prompt"`
	GreedyContinuation []int32       `json:"greedy_continuation"`
}

func readFP8Reference(t *testing.T, dir string) fp8Reference {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r fp8Reference
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.InputIDs) != 2 || len(r.Logits) != 2 || len(r.GreedyContinuation) != 24 {
		t.Fatalf("%s/reference.json has an unexpected layout", dir)
	}
	return r
}

// fp8Logits runs one forward of ids and returns every position's logits.
func fp8Logits(t *testing.T, m *decoder.Model, b kernels.Backend, ids []int32) []float32 {
	t.Helper()
	cache, err := m.NewKVCache(b, len(ids))
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Free()
	lt, err := m.Forward(b, cache, ids, true)
	if err != nil {
		t.Fatal(err)
	}
	v := make([]float32, lt.NumElements())
	if err := b.ReadF32(v, lt); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestFP8Checkpoints: both FP8 layouts load (their Linears FP8 with scales,
// the embedding, norms and lm_head not), and on every device, resident and
// offloaded with layers streaming: the CPU's logits at every position of
// both prompts are within 1e-3 of the references, a GPU's top-1 at every
// position is the CPU's, and the 24-token greedy continuation is the
// reference's, op by op and through the step path.
func TestFP8Checkpoints(t *testing.T) {
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		for _, fx := range fp8Fixtures {
			t.Run(fx.layout, func(t *testing.T) {
				ref := readFP8Reference(t, fx.dir)
				host := runtime.NewCPU(0)
				defer host.Close()
				cpuB, err := kernels.NewCPUBackend(host)
				if err != nil {
					t.Fatal(err)
				}
				cpuM := load(t, fx.dir, host)
				var fp8, plain int
				for _, mod := range nn.Modules(cpuM) {
					if l, ok := mod.(*nn.Linear); ok {
						if l.Scale != nil {
							fp8++
							if l.Weight.Peek().DType() != runtime.F8E4M3 {
								t.Errorf("%s: weight %v", l.Node().Name(), l.Weight.Peek().DType())
							}
						} else {
							plain++
						}
					}
				}
				if L := cpuM.Cfg.NumHiddenLayers; fp8 != 7*L || plain != 1 || cpuM.Head.Scale != nil {
					t.Errorf("%d FP8 Linears and %d plain, want %d and 1 (lm_head)", fp8, plain, 7*L)
				}
				cpuLogits := make([][]float32, len(ref.InputIDs))
				for p, ids := range ref.InputIDs {
					cpuLogits[p] = fp8Logits(t, cpuM, cpuB, ids)
				}

				// The CPU's logits at each step of the reference continuation.
				greedyCache, err := cpuM.NewKVCache(cpuB, len(ref.GreedyPrompt)+len(ref.GreedyContinuation))
				if err != nil {
					t.Fatal(err)
				}
				defer greedyCache.Free()
				cpuGreedy, err := testmodel.Steps(cpuM, cpuB, greedyCache, ref.GreedyPrompt, len(ref.GreedyContinuation), func(step int, _ []float32) int32 { return ref.GreedyContinuation[step] })
				if err != nil {
					t.Fatal(err)
				}
				check := func(t *testing.T, m *decoder.Model, what string) {
					V := m.Cfg.VocabSize
					for p, ids := range ref.InputIDs {
						got := fp8Logits(t, m, d.Backend, ids)
						for i := range ids {
							row := got[i*V : (i+1)*V]
							if d.Kind() == runtime.KindCPU {
								devtest.Close(t, row, ref.Logits[p][i], 1e-3, 0)
							}
							cpuRow := cpuLogits[p][i*V : (i+1)*V]
							if g, w := kernels.Argmax(row), kernels.Argmax(cpuRow); g != w {
								// A GPU's bf16 activations move logits by up to its
								// tolerance: a different top-1 is a near-tie then.
								if margin := float64(cpuRow[w] - cpuRow[g]); d.Kind() != runtime.KindCPU && margin <= d.Tol.Abs {
									t.Logf("%s: prompt %d position %d: top-1 %d, the CPU's %d: a near-tie (the CPU's margin %.3g ≤ %.3g)", what, p, i, g, w, margin, d.Tol.Abs)
								} else {
									t.Errorf("%s: prompt %d position %d: top-1 %d, the CPU's %d (max diff %.3g, the CPU's margin %.3g)", what, p, i, g, w, maxDiff(row, cpuRow), margin)
								}
							}
							if d.Kind() == runtime.KindCPU {
								if g, w := kernels.Argmax(row), kernels.Argmax(ref.Logits[p][i]); g != w {
									t.Errorf("%s: prompt %d position %d: top-1 %d, the reference's %d", what, p, i, g, w)
								}
							}
						}
					}
					for _, eager := range []bool{true, false} {
						got, err := m.Generate(d.Backend, ref.GreedyPrompt, decoder.GenerateOptions{MaxNewTokens: len(ref.GreedyContinuation), IgnoreEOS: true, Eager: eager})
						if err != nil {
							t.Fatal(err)
						}
						if j := firstDiff(got, ref.GreedyContinuation); j >= 0 {
							// On a GPU the paths may part at a near-tie of the CPU's
							// logits along the reference path, and only there.
							if d.Kind() == runtime.KindCPU || len(cpuGreedy) <= j || float64(cpuGreedy[j][ref.GreedyContinuation[j]]-cpuGreedy[j][got[j]]) > d.Tol.Abs {
								t.Errorf("%s, eager %v: greedy continuation\n got  %v\n want %v", what, eager, got, ref.GreedyContinuation)
							} else {
								t.Logf("%s, eager %v: greedy parts from the reference at step %d, a near-tie of the CPU's logits", what, eager, j)
							}
						}
					}
				}
				check(t, load(t, fx.dir, d.Dev), "resident")

				off := load(t, fx.dir, host)
				var unit, fixed int64
				for _, l := range off.Layers {
					var n int64
					for _, p := range nn.Parameters(l) {
						n += (p.Peek().NumBytes() + 255) / 256 * 256
					}
					unit = max(unit, n)
				}
				for _, p := range nn.Parameters(off) {
					if !strings.HasPrefix(p.Name(), "model.layers.") {
						fixed += (p.Peek().NumBytes() + 255) / 256 * 256
					}
				}
				name := t.Name()
				cfg := offload.DefaultConfig(d.Dev)
				cfg.GPUBudget = offload.Budget{Bytes: fixed + 2*unit}
				cfg.TransferBlocks = 2
				if err := offload.Offload(off, &cfg, name); err != nil {
					t.Fatal(err)
				}
				defer func() {
					if err := offload.Release(name, true); err != nil {
						t.Error(err)
					}
				}()
				check(t, off, "offloaded")
				units := offload.OffloadUnits(name)
				if len(units) == 0 {
					t.Fatalf("budget %d: no layer streams", cfg.GPUBudget.Bytes)
				}

				// The profile names the scale tensors; loading from it (strict:
				// every tensor it names must be in the checkpoint) reads FP8
				// weights and scales straight into their places.
				pdir := t.TempDir()
				if err := offload.SaveProfile(pdir, name); err != nil {
					t.Fatal(err)
				}
				st, err := offload.ReadProfile(pdir)
				if err != nil {
					t.Fatal(err)
				}
				var scales int
				for _, ts := range st.Tensors {
					if strings.HasSuffix(ts.Name, ".weight_scale") || strings.HasSuffix(ts.Name, ".weight_scale_inv") {
						scales++
					}
				}
				if scales != fp8 {
					t.Errorf("the profile names %d scale tensors, want %d", scales, fp8)
				}
				pname := name + "-profile"
				pm, pck, err := models.LoadFromProfile(fx.dir, st, cfg, pname, true)
				if err != nil {
					t.Fatal(err)
				}
				defer func() {
					if err := offload.Release(pname, true); err != nil {
						t.Error(err)
					}
					pm.Close()
					pck.Close()
				}()
				check(t, pm, "from profile")
			})
		}
	})
}

// TestFP8CheckpointErrors: an FP8 checkpoint whose scale tensor is
// missing or misshapen, a quantization_config with an unknown method or
// format, and FP8 weights without a quantization_config are errors naming
// the tensor or the field.
func TestFP8CheckpointErrors(t *testing.T) {
	const dir = "../../testdata/tiny-llama-fp8-channel"
	dev := runtime.NewCPU(0)
	defer dev.Close()
	cfgData, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	editConfig := func(t *testing.T, edit func(c map[string]any)) string {
		var c map[string]any
		if err := json.Unmarshal(cfgData, &c); err != nil {
			t.Fatal(err)
		}
		edit(c)
		out := t.TempDir()
		data, _ := json.Marshal(c)
		if err := os.WriteFile(filepath.Join(out, "config.json"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(mustAbs(t, filepath.Join(dir, "model.safetensors")), filepath.Join(out, "model.safetensors")); err != nil {
			t.Fatal(err)
		}
		return out
	}
	qc := func(c map[string]any) map[string]any { return c["quantization_config"].(map[string]any) }
	for _, tc := range []struct {
		name string
		edit func(c map[string]any)
		want []string
	}{
		{"no quantization_config", func(c map[string]any) { delete(c, "quantization_config") },
			[]string{"F8_E4M3", "no quantization_config", ".weight"}},
		{"unknown quant_method", func(c map[string]any) { qc(c)["quant_method"] = "gptq" },
			[]string{"quantization_config.quant_method", `"gptq" is not supported`}},
		{"unknown format", func(c map[string]any) { qc(c)["format"] = "pack-quantized" },
			[]string{"quantization_config.format", `"pack-quantized"`}},
		{"per-tensor strategy", func(c map[string]any) {
			qc(c)["config_groups"].(map[string]any)["group_0"].(map[string]any)["weights"].(map[string]any)["strategy"] = "tensor"
		}, []string{"strategy", `"tensor" is not supported`}},
		{"lm_head not ignored", func(c map[string]any) { qc(c)["ignore"] = []string{} },
			[]string{"lm_head.weight", "has dtype BF16", "want F8_E4M3"}},
		{"block layout over channel scales", func(c map[string]any) {
			c["quantization_config"] = map[string]any{"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": []int{64, 64}}
		}, []string{"weight_scale_inv", "missing"}},
		{"non-square blocks", func(c map[string]any) {
			c["quantization_config"] = map[string]any{"quant_method": "fp8", "weight_block_size": []int{64, 128}}
		}, []string{"weight_block_size", "[64 128]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, ck, err := models.Load(editConfig(t, tc.edit), dev)
			if err == nil {
				m.Close()
				ck.Close()
				t.Fatal("loaded without error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestFP8ScaleTensorErrors: a scale tensor missing from an FP8 checkpoint,
// or of the wrong shape, is an error naming it.
func TestFP8ScaleTensorErrors(t *testing.T) {
	dev := runtime.NewCPU(0)
	defer dev.Close()
	for _, fx := range fp8Fixtures {
		scale := "model.layers.1.mlp.down_proj.weight_scale"
		if fx.layout == "block" {
			scale += "_inv"
		}
		for _, tc := range []struct {
			name string
			edit func(ts []loader.NamedTensor) []loader.NamedTensor
			want []string
		}{
			{"missing", func(ts []loader.NamedTensor) []loader.NamedTensor {
				return slices.DeleteFunc(ts, func(nt loader.NamedTensor) bool { return nt.Name == scale })
			}, []string{"missing", scale}},
			{"wrong shape", func(ts []loader.NamedTensor) []loader.NamedTensor {
				for i := range ts {
					if ts[i].Name == scale {
						ts[i].Shape = []int{1, ts[i].Shape[0] * ts[i].Shape[1]}
					}
				}
				return ts
			}, []string{scale, "has shape"}},
		} {
			t.Run(fx.layout+"/"+tc.name, func(t *testing.T) {
				ck, err := loader.OpenCheckpoint(fx.dir)
				if err != nil {
					t.Fatal(err)
				}
				defer ck.Close()
				var ts []loader.NamedTensor
				for _, n := range ck.Names() {
					info, _ := ck.Info(n)
					b, err := ck.Bytes(n)
					if err != nil {
						t.Fatal(err)
					}
					ts = append(ts, loader.NamedTensor{Name: n, DType: info.DType, Shape: info.Shape, Data: b})
				}
				out := t.TempDir()
				if err := loader.WriteFile(filepath.Join(out, "model.safetensors"), tc.edit(ts), nil); err != nil {
					t.Fatal(err)
				}
				cfg, err := os.ReadFile(filepath.Join(fx.dir, "config.json"))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(out, "config.json"), cfg, 0o644); err != nil {
					t.Fatal(err)
				}
				m, ck2, err := models.Load(out, dev)
				if err == nil {
					m.Close()
					ck2.Close()
					t.Fatal("loaded without error")
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
			})
		}
	}
}

// TestMakeCheckpointFP8: random checkpoints in both FP8 layouts carry the
// quantization_config and F8_E4M3 weights with scales (lm_head BF16), load
// through the registry and generate; an unknown format is an error.
func TestMakeCheckpointFP8(t *testing.T) {
	for _, format := range []string{decoder.FormatFP8Channel, decoder.FormatFP8Block} {
		for _, shape := range []string{"qwen3-tiny", "mistral-tiny"} {
			t.Run(format+"/"+shape, func(t *testing.T) {
				dir := filepath.Join(t.TempDir(), shape)
				if err := models.MakeCheckpointFormat(dir, shape, format, 2, 7, 64<<10); err != nil {
					t.Fatal(err)
				}
				dev, b := cpu(t)
				m := load(t, dir, dev)
				var fp8 int
				for _, mod := range nn.Modules(m) {
					l, ok := mod.(*nn.Linear)
					if !ok || l.Scale == nil {
						continue
					}
					fp8++
					w, s := l.Weight.Peek(), l.Scale.Peek()
					wantS := runtime.BF16
					if format == decoder.FormatFP8Block {
						wantS = runtime.F32
					}
					if w.DType() != runtime.F8E4M3 || s.DType() != wantS || !s.Shape().Equal(l.ScaleShape()) {
						t.Fatalf("%s: weight %v, scale %v %v", l.Node().Name(), w.DType(), s.DType(), s.Shape())
					}
				}
				if fp8 != 14 || m.Head.Scale != nil {
					t.Errorf("%d FP8 Linears (head FP8: %v), want 14 and a BF16 head", fp8, m.Head.Scale != nil)
				}
				ids := []int32{3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
				logits := fp8Logits(t, m, b, ids)
				for _, v := range logits {
					if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
						t.Fatalf("non-finite logit %v", v)
					}
				}
				out, err := m.Generate(b, ids, decoder.GenerateOptions{MaxNewTokens: 4, IgnoreEOS: true})
				if err != nil || len(out) != 4 {
					t.Fatalf("generate: %v, %v", out, err)
				}
			})
		}
	}
	if err := models.MakeCheckpointFormat(t.TempDir(), "qwen3-tiny", "int4", 1, 1, 1<<20); err == nil || !strings.Contains(err.Error(), `"int4"`) {
		t.Errorf("unknown format: %v", err)
	}
}

// firstDiff is the first index where a and b differ (or where one ends), -1
// when they are equal.
func firstDiff(a, b []int32) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}
