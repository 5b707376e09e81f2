package all_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/internal/testfile"
	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models"
	_ "github.com/flextensor-go/flextensor/models/all"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// fixtures are the tiny checkpoints of make_family_fixtures.py
// (transformers 5.17, float32 eager attention over bf16-rounded weights).
var fixtures = []struct{ dir, family string }{
	{"../../testdata/tiny-qwen2", "qwen2"},
	{"../../testdata/tiny-qwen3", "qwen3"},
	{"../../testdata/tiny-mistral", "mistral"},
}

// reference is the fixture's reference.json.
type reference = testmodel.Reference

func readReference(t *testing.T, dir string) reference {
	t.Helper()
	var r reference
	testfile.ReadJSON(t, filepath.Join(dir, "reference.json"), &r)
	if len(r.InputIDs) != 2 || len(r.Logits) != 2 || len(r.GreedyContinuation) != 24 || len(r.LongPrompt) != 40 || len(r.LongLastLogits) == 0 {
		t.Fatalf("%s/reference.json has an unexpected layout", dir)
	}
	return r
}

// v4Dialect copies the checkpoint in dir to a temporary directory with its
// config.json rewritten as transformers 4 writes it: rope_theta at the top
// instead of rope_parameters, torch_dtype instead of dtype, no layer_types,
// and (Qwen) a sliding_window value that use_sliding_window false leaves
// unused.
func v4Dialect(t *testing.T, dir string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	rp, ok := c["rope_parameters"].(map[string]any)
	if !ok {
		t.Fatalf("%s: no rope_parameters", dir)
	}
	c["rope_theta"] = rp["rope_theta"]
	c["rope_scaling"] = nil
	c["torch_dtype"] = c["dtype"]
	c["transformers_version"] = "4.51.0"
	delete(c, "rope_parameters")
	delete(c, "dtype")
	delete(c, "layer_types")
	if _, ok := c["use_sliding_window"]; ok {
		c["sliding_window"] = 4096
	}
	out := t.TempDir()
	data, err = json.MarshalIndent(c, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(mustAbs(t, filepath.Join(dir, "model.safetensors")), filepath.Join(out, "model.safetensors")); err != nil {
		t.Fatal(err)
	}
	return out
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func load(t testing.TB, dir string, dev runtime.Device) *decoder.Model {
	t.Helper()
	return testmodel.Load(t, models.Load, dir, dev)
}

// cpu is a fresh CPU device and its kernels (devtest.NewCPU).
func cpu(t testing.TB) (runtime.Device, kernels.Backend) {
	t.Helper()
	d := devtest.NewCPU(t)
	return d.Dev, d.Backend
}

func maxDiff(got, want []float32) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	var d float64
	for i := range got {
		d = max(d, math.Abs(float64(got[i])-float64(want[i])))
	}
	return d
}

// TestGolden: for every family fixture, in both config.json dialects, the
// CPU logits of both prompts (every position) and of the 40-token prompt's
// last position (past Mistral's window of 8) are within 1e-3 of
// transformers', and the 24-token greedy continuation is identical, op by
// op and through the fused/graph step path alike.
func TestGolden(t *testing.T) {
	checkGolden(t, fixtures, v4Dialect)
}

// checkGolden runs the golden comparison of TestGolden and TestMoEGolden on
// each fixture, in the transformers 5 config.json dialect and in the
// transformers 4 one that v4 writes: the registry picks the fixture's
// family, the logits of every prompt position and of the long prompt's
// last are within 1e-3 of transformers', the greedy continuation is
// identical eager and through the step path, and both dialects parse to
// the same config.
func checkGolden(t *testing.T, fxs []struct{ dir, family string }, v4 func(t *testing.T, dir string) string) {
	t.Helper()
	for _, fx := range fxs {
		ref := readReference(t, fx.dir)
		var cfgs []decoder.Config
		for _, dialect := range []string{"transformers5", "transformers4"} {
			t.Run(fx.family+"/"+dialect, func(t *testing.T) {
				dir := fx.dir
				if dialect == "transformers4" {
					dir = v4(t, fx.dir)
				}
				data, path, err := readConfig(dir)
				if err != nil {
					t.Fatal(err)
				}
				f, err := models.Lookup(data, path)
				if err != nil {
					t.Fatal(err)
				}
				if f.Name != fx.family {
					t.Fatalf("registry picked %s, want %s", f.Name, fx.family)
				}
				dev, b := cpu(t)
				m := load(t, dir, dev)
				cfgs = append(cfgs, m.Cfg)
				V := m.Cfg.VocabSize
				for p, ids := range ref.InputIDs {
					got := testmodel.Forward(t, m, b, ids, true)
					for i := range ids {
						if d := maxDiff(got[i*V:(i+1)*V], ref.Logits[p][i]); d > 1e-3 {
							t.Errorf("prompt %d position %d: logits differ from transformers by %.2g", p, i, d)
						}
					}
				}
				if d := maxDiff(testmodel.Forward(t, m, b, ref.LongPrompt, false), ref.LongLastLogits); d > 1e-3 {
					t.Errorf("40-token prompt: last logits differ from transformers by %.2g", d)
				}
				for _, eager := range []bool{true, false} {
					got, err := m.Generate(b, ref.GreedyPrompt, decoder.GenerateOptions{MaxNewTokens: 24, IgnoreEOS: true, Eager: eager})
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(got, ref.GreedyContinuation) {
						t.Errorf("eager %v: greedy continuation\n got  %v\n want %v", eager, got, ref.GreedyContinuation)
					}
				}
			})
		}
		if len(cfgs) == 2 && !reflect.DeepEqual(cfgs[0], cfgs[1]) {
			t.Errorf("%s: the dialects parse differently:\n v5 %+v\n v4 %+v", fx.family, cfgs[0], cfgs[1])
		}
	}
}

func readConfig(dir string) ([]byte, string, error) {
	p := filepath.Join(dir, "config.json")
	data, err := os.ReadFile(p)
	return data, p, err
}

// TestFamilyKnobs: each fixture's model has what its family differs in.
func TestFamilyKnobs(t *testing.T) {
	dev, _ := cpu(t)
	for _, fx := range fixtures {
		m := load(t, fx.dir, dev)
		a := m.Layers[0].Attn
		bias, qk, win := a.Q.Bias != nil, a.QNorm != nil, a.Window
		want := map[string][3]any{"qwen2": {true, false, 0}, "qwen3": {false, true, 0}, "mistral": {false, false, 8}}[fx.family]
		if got := [3]any{bias, qk, win}; got != want {
			t.Errorf("%s: bias, q/k norm, window = %v, want %v", fx.family, got, want)
		}
		if a.O.Bias != nil || a.K.Bias != nil != bias || a.V.Bias != nil != bias {
			t.Errorf("%s: biases on k %v, v %v, o %v", fx.family, a.K.Bias != nil, a.V.Bias != nil, a.O.Bias != nil)
		}
	}
}

// strictBackend is a CPU backend on the compute device that refuses tensors
// of another device (a parameter the engine forgot to move), forwarding the
// optional ops the families need.
type strictBackend struct {
	*kernels.CPUBackend
	dev runtime.Device
}

func (s strictBackend) check(op string, ts ...*runtime.Tensor) error {
	for _, t := range ts {
		if t.Device() != s.dev {
			return fmt.Errorf("%s: tensor %v is on %s, not the compute device", op, t, t.Device().Name())
		}
	}
	return nil
}

func (s strictBackend) MatMul(out, x, w *runtime.Tensor) error {
	if err := s.check("MatMul", out, x, w); err != nil {
		return err
	}
	return s.CPUBackend.MatMul(out, x, w)
}

func (s strictBackend) RMSNorm(out, x, w *runtime.Tensor, eps float32) error {
	if err := s.check("RMSNorm", out, x, w); err != nil {
		return err
	}
	return s.CPUBackend.RMSNorm(out, x, w, eps)
}

func (s strictBackend) AddBias(x, bias *runtime.Tensor) error {
	if err := s.check("AddBias", x, bias); err != nil {
		return err
	}
	return s.CPUBackend.AddBias(x, bias)
}

// TestOffloadedEqualsResident: each family fixture offloaded onto a CPU
// compute device, with budgets where some layers stream and where all fit,
// gives the resident logits bit for bit over a prefill past Mistral's window
// and decode steps.
func TestOffloadedEqualsResident(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(fx.family, func(t *testing.T) {
			ref := readReference(t, fx.dir)
			prompt, steps := ref.LongPrompt, 6
			host, hb := cpu(t)
			want := testmodel.Run(t, load(t, fx.dir, host), hb, prompt, steps)
			probe := load(t, fx.dir, host)
			var unit, fixed, total int64
			for _, l := range probe.Layers {
				var n int64
				for _, p := range nn.Parameters(l) {
					n += (p.Peek().NumBytes() + 255) / 256 * 256
				}
				unit, total = max(unit, n), total+n
			}
			for _, p := range nn.Parameters(probe) {
				if !strings.HasPrefix(p.Name(), "model.layers.") {
					fixed += (p.Peek().NumBytes() + 255) / 256 * 256
				}
			}
			for _, budget := range []int64{fixed + 2*unit, fixed + total} {
				t.Run(fmt.Sprint(budget), func(t *testing.T) {
					dev := runtime.NewCPU(0)
					defer dev.Close()
					m := load(t, fx.dir, host)
					cb, err := kernels.NewCPUBackend(dev)
					if err != nil {
						t.Fatal(err)
					}
					name := fmt.Sprintf("%s-%s-%d", t.Name(), fx.family, budget)
					cfg := offload.DefaultConfig(dev)
					cfg.GPUBudget = offload.Budget{Bytes: budget}
					cfg.TransferBlocks = 2
					cfg.OffloadTiming = offload.TimingEager
					if err := offload.Offload(m, &cfg, name); err != nil {
						t.Fatal(err)
					}
					defer func() {
						if err := offload.Release(name, true); err != nil {
							t.Error(err)
						}
					}()
					got := testmodel.Run(t, m, strictBackend{cb, dev}, prompt, steps)
					for i := range want {
						if !slices.Equal(got[i], want[i]) {
							t.Fatalf("pass %d: offloaded logits differ from resident ones by %.3g", i, maxDiff(got[i], want[i]))
						}
					}
					streamed := len(offload.OffloadUnits(name))
					if (budget < fixed+total) != (streamed > 0) {
						t.Errorf("budget %d of %d: %d layers stream", budget, fixed+total, streamed)
					}
				})
			}
		})
	}
}
