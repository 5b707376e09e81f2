package all_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models"
	"github.com/flextensor-go/flextensor/models/decoder"
)

// wideFixture writes a random checkpoint of the family fixture in dir with
// Llama-3-8B's attention shape cut small: head width 128, 8 query heads
// over 2 KV heads (hidden size 1024), 2 layers of intermediate size 256,
// 1024 positions; the rest of dir's config.json (biases, q/k norms, sliding
// window, FP8 quantization) as it is. It returns the checkpoint's
// directory. The fixtures' head width of 32 is one no fused decode kernel
// takes.
func wideFixture(t *testing.T, dir string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]any{"hidden_size": 1024, "intermediate_size": 256, "num_attention_heads": 8, "num_key_value_heads": 2,
		"head_dim": 128, "num_hidden_layers": 2, "max_position_embeddings": 1024} {
		c[k] = v
	}
	if data, err = json.Marshal(c); err != nil {
		t.Fatal(err)
	}
	src := "wide " + filepath.Base(dir)
	f, err := models.Lookup(data, src)
	if err != nil {
		t.Fatal(err)
	}
	m, err := f.New(data, src)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "wide-"+filepath.Base(dir))
	if err := decoder.WriteRandomCheckpoint(out, m, data, 21, 1<<30); err != nil {
		t.Fatal(err)
	}
	return out
}

// ropeAttnCounter is the CPU backend with a kernels.RoPEAttender by the
// separate ops (kernels.AttendRoPERef), counted; decline makes it decline
// every call (the decoder then runs ropeAndAppend and the attention op).
type ropeAttnCounter struct {
	*kernels.CPUBackend
	calls   int
	decline bool
}

func (c *ropeAttnCounter) RoPEAttends() bool { return true }

func (c *ropeAttnCounter) AttendRoPE(a kernels.RoPEAttention) (bool, error) {
	if c.decline {
		return false, nil
	}
	c.calls++
	return true, kernels.AttendRoPERef(c.CPUBackend, a)
}

// TestRoPEAttentionFamilies: on the CPU, with a backend that folds RoPE
// and the KV store into the attention op (kernels.RoPEAttender), the
// one-token steps of Llama, Qwen2 (q/k/v biases), Qwen3 (q/k norms before
// the rotation), Mistral (sliding window) and FP8 Llama (per-channel),
// at head width 128, run every layer's RoPE, store and attention as that
// one op, and the logits are bit for bit those of the plain CPU backend;
// the op declining gives them too.
func TestRoPEAttentionFamilies(t *testing.T) {
	for _, dir := range []string{"../../testdata/tiny-llama", "../../testdata/tiny-qwen2", "../../testdata/tiny-qwen3",
		"../../testdata/tiny-mistral", "../../testdata/tiny-llama-fp8-channel"} {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			dev, b := cpu(t)
			cb := b.(*kernels.CPUBackend)
			m := load(t, wideFixture(t, dir), dev)
			if m.Cfg.HeadDim != 128 || m.Cfg.NumAttentionHeads != 8 {
				t.Fatalf("wide fixture: head width %d, %d heads; want 128, 8", m.Cfg.HeadDim, m.Cfg.NumAttentionHeads)
			}
			prompt := []int32{5, 17, 42, 3, 9, 11, 13, 1, 2, 7, 30, 4}
			const n = 5
			run := func(be kernels.Backend) [][]float32 {
				cache, err := m.NewKVCache(be, 24)
				if err != nil {
					t.Fatal(err)
				}
				defer cache.Free()
				out, err := testmodel.Steps(m, be, cache, prompt, n, func(s int, _ []float32) int32 { return int32(20 + s) })
				if err != nil {
					t.Fatal(err)
				}
				return out
			}
			want := run(cb)
			same := func(what string, got [][]float32) {
				t.Helper()
				if len(got) != len(want) {
					t.Fatalf("%s: %d forwards, want %d", what, len(got), len(want))
				}
				for i := range want {
					if !slices.Equal(got[i], want[i]) {
						t.Errorf("%s: forward %d: logits differ from the plain backend (max |diff| %g)", what, i, maxDiff(got[i], want[i]))
					}
				}
			}
			f := &ropeAttnCounter{CPUBackend: cb}
			same("fused", run(f))
			if f.calls != n*len(m.Layers) {
				t.Errorf("fused: %d calls, want %d (one a layer a one-token step)", f.calls, n*len(m.Layers))
			}
			d := &ropeAttnCounter{CPUBackend: cb, decline: true}
			same("declined", run(d))
			if d.calls != 0 {
				t.Errorf("declined: %d calls counted", d.calls)
			}
		})
	}
}
