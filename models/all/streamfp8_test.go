package all_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// streamFixtures are the BF16 fixtures --stream-dtype fp8 is measured on.
var streamFixtures = []string{"../../testdata/tiny-llama", "../../testdata/tiny-qwen2", "../../testdata/tiny-qwen3", "../../testdata/tiny-mistral"}

// bf16Prompts reads a fixture's two prompts and greedy prompt.
func bf16Prompts(t *testing.T, dir string) (ids [][]int32, greedy []int32, steps int) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		InputIDs           [][]int32 `json:"input_ids"`
		GreedyPrompt       []int32   `json:"greedy_prompt"`
		GreedyContinuation []int32   `json:"greedy_continuation"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	return r.InputIDs, r.GreedyPrompt, len(r.GreedyContinuation)
}

// TestStreamDTypeFP8: a BF16 checkpoint offloaded with StreamDType F8_E4M3
// streams its layers as FP8 (each unit about half its BF16 bytes plus the
// scales), and agrees with the BF16 run: top-1 at ≥ 95% of the fixtures'
// prompt positions and the greedy continuation's tokens (reported). After
// Release the model has its BF16 weights again and, offloaded again, gives
// the BF16 logits (bit for bit on the CPU); a profile saved meanwhile is
// adopted with the stream dtype only; nothing stays allocated (the devices'
// Close checks).
func TestStreamDTypeFP8(t *testing.T) {
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		var agree, total, gAgree, gTotal, tfAgree, tfTotal int
		for _, dir := range streamFixtures {
			t.Run(filepath.Base(dir), func(t *testing.T) {
				prompts, greedy, steps := bf16Prompts(t, dir)
				host := runtime.NewCPU(0)
				defer func() {
					if err := host.Close(); err != nil {
						t.Error(err)
					}
				}()
				m, ck, err := models.Load(dir, host)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { m.Close(); ck.Close() }()

				var unitBF16 int64
				for _, p := range nn.Parameters(m.Layers[0]) {
					unitBF16 += p.Peek().NumBytes()
				}
				// The budget keeps the non-unit weights and two transfer slots
				// of the largest unit (in the form it streams in): every
				// layer streams.
				align := func(n int64) int64 { return (n + 255) / 256 * 256 }
				var fixed, unit, unitQ int64
				for _, p := range nn.Parameters(m) {
					if !strings.HasPrefix(p.Name(), "model.layers.") {
						fixed += align(p.Peek().NumBytes())
					}
				}
				for _, l := range m.Layers {
					var n, nq int64
					for _, p := range nn.Parameters(l) {
						n += align(p.Peek().NumBytes())
						if lin, ok := p.Owner().(*nn.Linear); ok && p == lin.Weight {
							nq += align(int64(lin.Out*lin.In)) + align(int64(lin.Out*4))
						} else {
							nq += align(p.Peek().NumBytes())
						}
					}
					unit, unitQ = max(unit, n), max(unitQ, nq)
				}
				offloadOnce := func(name string, sd runtime.DType) {
					cfg := offload.DefaultConfig(d.Dev)
					cfg.GPUBudget = offload.Budget{Bytes: fixed + 2*unit}
					if sd == runtime.F8E4M3 {
						cfg.GPUBudget = offload.Budget{Bytes: fixed + 2*unitQ}
					}
					cfg.TransferBlocks = 2
					cfg.StreamDType = sd
					if err := offload.Offload(m, &cfg, name); err != nil {
						t.Fatal(err)
					}
				}
				runAll := func() (logits [][]float32, gen []int32) {
					for _, ids := range prompts {
						logits = append(logits, fp8Logits(t, m, d.Backend, ids))
					}
					gen, err := m.Generate(d.Backend, greedy, decoder.GenerateOptions{MaxNewTokens: steps, IgnoreEOS: true, Eager: true})
					if err != nil {
						t.Fatal(err)
					}
					return logits, gen
				}
				name := t.Name()
				offloadOnce(name+"-bf16", runtime.Invalid)
				wantLogits, wantGen := runAll()
				if err := offload.Release(name+"-bf16", true); err != nil {
					t.Fatal(err)
				}

				offloadOnce(name+"-fp8", runtime.F8E4M3)
				var unitFP8 int64
				for _, p := range nn.Parameters(m.Layers[0]) {
					unitFP8 += p.Peek().NumBytes()
					if l, ok := p.Owner().(*nn.Linear); ok && (l.Scale == nil || l.Weight.Peek().DType() != runtime.F8E4M3) {
						t.Fatalf("%s is not FP8 while streamed", p.Name())
					}
				}
				if m.Head.Scale != nil || m.Embed.Weight.Peek().DType() == runtime.F8E4M3 {
					t.Error("the head or the embedding was quantized")
				}
				if len(offload.OffloadUnits(name+"-fp8")) == 0 {
					// INFERENCE starts after the profiling passes: run them.
					runAll()
				}
				if unitFP8 >= unitBF16*6/10 {
					t.Errorf("a unit is %d bytes as FP8, %d as BF16: want about half", unitFP8, unitBF16)
				}
				gotLogits, gotGen := runAll()
				if len(offload.OffloadUnits(name+"-fp8")) == 0 {
					t.Error("no unit streams")
				}
				V := m.Cfg.VocabSize
				var a, n0 int
				var worst, spread float64
				for p := range prompts {
					for i := range prompts[p] {
						n0++
						g, w := gotLogits[p][i*V:(i+1)*V], wantLogits[p][i*V:(i+1)*V]
						if kernels.Argmax(g) == kernels.Argmax(w) {
							a++
						}
						worst = max(worst, maxDiff(g, w))
						lo, hi := slices.Min(w), slices.Max(w)
						spread = max(spread, float64(hi-lo))
					}
				}
				agree, total = agree+a, total+n0
				t.Logf("top-1: %d/%d positions agree with BF16; max |logit diff| %.3g (BF16 logits span up to %.3g)", a, n0, worst, spread)
				n := 0
				for n < len(gotGen) && gotGen[n] == wantGen[n] {
					n++
				}
				// Teacher-forced: the FP8 model's top-1 along the BF16 greedy
				// path.
				path := append(slices.Clone(greedy), wantGen...)
				tf := fp8Logits(t, m, d.Backend, path)
				for i := len(greedy) - 1; i < len(path)-1; i++ {
					tfTotal++
					if kernels.Argmax(tf[i*V:(i+1)*V]) == int(path[i+1]) {
						tfAgree++
					}
				}

				// On the CPU the streamed FP8 model is exactly the resident
				// model quantized the same way by hand.
				if d.Kind() == runtime.KindCPU {
					ref := load(t, dir, d.Dev)
					quantizeByHand(t, ref, d.Dev)
					for p, ids := range prompts {
						if !slices.Equal(fp8Logits(t, ref, d.Backend, ids), gotLogits[p]) {
							t.Errorf("prompt %d: streamed FP8 logits differ from the resident model quantized by hand", p)
						}
					}
				}
				gAgree += n
				gTotal += len(wantGen)
				t.Logf("greedy: first %d of %d tokens agree with BF16", n, len(wantGen))

				pdir := t.TempDir()
				if err := offload.SaveProfile(pdir, name+"-fp8"); err != nil {
					t.Fatal(err)
				}
				if err := offload.Release(name+"-fp8", true); err != nil {
					t.Fatal(err)
				}
				for _, mod := range nn.Modules(m) {
					if l, ok := mod.(*nn.Linear); ok && l.Scale != nil {
						t.Fatalf("%s still FP8 after Release", l.Node().Name())
					}
				}
				same := func(got, want []float32) bool {
					if d.Kind() == runtime.KindCPU {
						return slices.Equal(got, want)
					}
					return devtest.Close(t, got, want, d.Tol.Abs, d.Tol.Rel)
				}
				offloadOnce(name+"-bf16-again", runtime.Invalid)
				after, _ := runAll()
				if err := offload.Release(name+"-bf16-again", true); err != nil {
					t.Fatal(err)
				}
				for p := range after {
					if !same(after[p], wantLogits[p]) {
						t.Errorf("prompt %d: the BF16 logits after an FP8 offload differ from before", p)
					}
				}

				// The profile names the FP8 tensors: adopting it needs the
				// stream dtype; with it, the engine converts the model again.
				st, err := offload.ReadProfile(pdir)
				if err != nil {
					t.Fatal(err)
				}
				cfg := offload.DefaultConfig(d.Dev)
				if err := offload.OffloadFromState(m, st, &cfg, name+"-plain", false); !errors.Is(err, offload.ErrProfileMismatch) {
					t.Errorf("an FP8 profile adopted without a stream dtype: %v", err)
				}
				cfg.StreamDType = runtime.F8E4M3
				if err := offload.OffloadFromState(m, st, &cfg, name+"-state", false); err != nil {
					t.Fatal(err)
				}
				again, _ := runAll()
				for p := range again {
					if !same(again[p], gotLogits[p]) {
						t.Errorf("prompt %d: FP8 from the profile differs from the FP8 offload", p)
					}
				}
				if err := offload.Release(name+"-state", true); err != nil {
					t.Fatal(err)
				}
				if _, _, err := models.LoadFromProfile(dir, st, cfg, name+"-src", true); err == nil {
					t.Error("LoadFromProfile with a stream dtype: no error")
				}
			})
		}
		t.Logf("stream dtype fp8 vs bf16 on %s: top-1 agreement %d/%d prompt positions (%.1f%%), %d/%d along the BF16 greedy paths (%.1f%%); greedy tokens before the first divergence %d/%d",
			d.Name, agree, total, pct(agree, total), tfAgree, tfTotal, pct(tfAgree, tfTotal), gAgree, gTotal)
		// The tiny fixtures have random weights and flat logits: median
		// top-1/top-2 margins of 0.12 to 0.27, a third to a half of the
		// positions under 0.2, against FP8 logit errors of 0.2 to 0.5.
		// Agreement is lower than on trained models, where 95% is
		// expected; this bound catches a broken path (a wrong one agrees
		// at about chance, 1 in 256), not FP8's loss: the exact check
		// above pins the CPU path down.
		if a := pct(agree+tfAgree, total+tfTotal); a < 50 {
			t.Errorf("top-1 agreement %.1f%% is below 50%%", a)
		}
	})
}

func pct(a, b int) float64 { return 100 * float64(a) / float64(max(b, 1)) }

// quantizeByHand switches every Linear of m's layers to FP8 per output
// channel (kernels.QuantizeMatFP8, buffers on dev freed at the test's end),
// as StreamDType F8_E4M3 does.
func quantizeByHand(t *testing.T, m *decoder.Model, dev runtime.Device) {
	t.Helper()
	for _, l := range m.Layers {
		for _, mod := range nn.Modules(l) {
			lin, ok := mod.(*nn.Linear)
			if !ok {
				continue
			}
			q, err := runtime.NewTensor(dev, runtime.F8E4M3, runtime.Shape{lin.Out, lin.In}, "q")
			if err != nil {
				t.Fatal(err)
			}
			sc, err := runtime.NewTensor(dev, runtime.F32, runtime.Shape{lin.Out, 1}, "s")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { q.Buffer().Free(); sc.Buffer().Free() })
			wm, err := kernels.AsMat(lin.Weight.Peek())
			if err != nil {
				t.Fatal(err)
			}
			if err := kernels.QuantizeMatFP8(q.Bytes(), sc.F32(), wm); err != nil {
				t.Fatal(err)
			}
			if err := lin.SetFP8(q, sc, kernels.FP8Layout{}, "weight_scale"); err != nil {
				t.Fatal(err)
			}
		}
	}
}
