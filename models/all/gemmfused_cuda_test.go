//go:build cuda

package all_test

import (
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/kernels/cudabackend"
	"github.com/flextensor-go/flextensor/runtime"
)

// fusingGPU is the CUDA backend counting its fused-epilogue GEMMs that ran.
type fusingGPU struct {
	*cudabackend.Backend
	gateUp, qkv int
}

func (c *fusingGPU) GateUpSiLUFused(out, x, wg, wu *runtime.Tensor) (bool, error) {
	ran, err := c.Backend.GateUpSiLUFused(out, x, wg, wu)
	if ran {
		c.gateUp++
	}
	return ran, err
}

func (c *fusingGPU) ProjectRoPEStoreRows(a kernels.QKVRoPERows) (bool, error) {
	ran, err := c.Backend.ProjectRoPEStoreRows(a)
	if ran {
		c.qkv++
	}
	return ran, err
}

// realishLlama writes a random checkpoint of Llama-3-8B's config cut small
// (2 layers, hidden 512, 4 heads of 128 over 2 KV heads, intermediate 512:
// shapes both fused GEMMs take) and returns its directory.
func realishLlama(t *testing.T) string {
	t.Helper()
	return realish(t, "llama3-8b", "realish llama", 5, func(c map[string]any) {
		for k, v := range map[string]any{"hidden_size": 512, "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2,
			"head_dim": 128, "vocab_size": 512, "max_position_embeddings": 1024, "bos_token_id": 0, "eos_token_id": 1} {
			c[k] = v
		}
	})
}

// TestFusedGEMMsModelGPU: a Llama of head width 128 cut small and Qwen2's
// fixture (intermediate 256) run prefills of 300 and 260 tokens (forwards
// of 256 rows and more), alone (a contiguous cache) and batched (the paged
// pool) with decode steps, with the fused-epilogue GEMMs on and off
// (Backend.SwiGLUGEMM, QKVGEMM; FT_SWIGLU_GEMM=0, FT_QKV_GEMM): on sm_90
// the gate/up GEMM runs in every layer of each large forward, the q/k/v
// GEMM too in the Llama (Qwen2's q/k/v biases keep it out), off neither;
// both choose the same greedy token at every forward, and the fused
// logits are about as close to the CPU's fp32 forwards as the separate
// path's (within 1.5 × its largest difference + 0.01: the fused GEMMs keep
// their products in fp32 where the separate path rounds them to bf16; the
// differences are logged).
func TestFusedGEMMsModelGPU(t *testing.T) {
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		gb, ok := d.Backend.(*cudabackend.Backend)
		if !ok {
			t.Skipf("the fused-epilogue GEMMs are the CUDA backend's; %s has none", d.Name)
		}
		defer func(s, q bool) { gb.SwiGLUGEMM, gb.QKVGEMM = s, q }(gb.SwiGLUGEMM, gb.QKVGEMM)
		hopper := false
		if cc, ok := d.Dev.(interface{ ComputeCapability() int }); ok {
			hopper = cc.ComputeCapability() == 90
		}
		for _, fx := range []struct {
			family, dir string
			qkv         bool
		}{{"llama-d128", realishLlama(t), true}, {"qwen2", "../../testdata/tiny-qwen2", false}} {
			t.Run(fx.family, func(t *testing.T) {
				m := load(t, fx.dir, d.Dev)
				V := m.Cfg.VocabSize
				ps := []seqPlan{{planPrompt(300, 1, V), 3, 0}, {planPrompt(5, 2, V), 4, 0}, {planPrompt(260, 3, V), 2, 1}}
				run := func(on bool) ([][][]float32, [][][]float32, *fusingGPU) {
					gb.SwiGLUGEMM, gb.QKVGEMM = on, on
					fg := &fusingGPU{Backend: gb}
					alone := runAlone(t, m, fg, ps)
					cache, err := m.NewPagedCache(fg, 256, 4)
					if err != nil {
						t.Fatal(err)
					}
					defer cache.Close()
					return alone, runBatched(t, m, fg, cache, ps), fg
				}
				aOn, bOn, on := run(true)
				aOff, bOff, off := run(false)
				L := m.Cfg.NumHiddenLayers
				large := 4 * L // two prompts alone, two batched forwards of 256 rows and more
				// Each forward's last layer runs its MLP on the rows whose
				// logits it returns (models/decoder/lastrows.go): the prompts'
				// last row, the batched forwards' 2 and 3; the batched
				// forwards' last layers make those rows' queries alone too
				// (no fused q/k/v GEMM there).
				wantGU, wantQKV := map[bool]int{true: large - 4}[hopper], map[bool]int{true: large - 2}[hopper && fx.qkv]
				if on.gateUp != wantGU || on.qkv != wantQKV {
					t.Errorf("fused on (compute capability 9.0 %v): %d gate/up and %d q/k/v GEMMs, want %d and %d", hopper, on.gateUp, on.qkv, wantGU, wantQKV)
				}
				if off.gateUp != 0 || off.qkv != 0 {
					t.Errorf("fused off: %d gate/up and %d q/k/v GEMMs ran", off.gateUp, off.qkv)
				}
				// Both against the CPU's fp32 forwards of each sequence alone.
				cd, cb := cpu(t)
				ref := runAlone(t, load(t, fx.dir, cd), cb, ps)
				errOn, errOff, worst := 0.0, 0.0, 0.0
				for _, pair := range [][2][][][]float32{{aOn, aOff}, {bOn, bOff}} {
					for i := range pair[0] {
						if len(pair[0][i]) != len(pair[1][i]) || len(pair[0][i]) != len(ref[i]) {
							t.Fatalf("sequence %d: %d forwards fused, %d not, %d on the CPU", i, len(pair[0][i]), len(pair[1][i]), len(ref[i]))
						}
						for s := range pair[0][i] {
							worst = max(worst, maxDiff(pair[0][i][s], pair[1][i][s]))
							errOn, errOff = max(errOn, maxDiff(pair[0][i][s], ref[i][s])), max(errOff, maxDiff(pair[1][i][s], ref[i][s]))
							if g, w := kernels.Argmax(pair[0][i][s]), kernels.Argmax(pair[1][i][s]); g != w {
								t.Errorf("sequence %d forward %d: greedy token %d fused, %d separate", i, s, g, w)
							}
						}
					}
				}
				if errOn > 1.5*errOff+0.01 {
					t.Errorf("fused logits %.3g from the CPU's, the separate path's %.3g: want at most 1.5 × that + 0.01", errOn, errOff)
				}
				t.Logf("%s: %d gate/up and %d q/k/v fused GEMMs; logits differ by at most %.3g, from the CPU's by %.3g fused and %.3g separate",
					fx.family, on.gateUp, on.qkv, worst, errOn, errOff)
			})
		}
	})
}
