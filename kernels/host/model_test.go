package host_test

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/flextensor-go/flextensor/internal/testfile"
	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/kernels/host"
	"github.com/flextensor-go/flextensor/models"
	_ "github.com/flextensor-go/flextensor/models/all"
	"github.com/flextensor-go/flextensor/runtime"
)

// logitTol is the stated end-to-end tolerance: every logit of every pass
// within logitTol·(1 + max|logit| of that pass) of the reference backend's.
const logitTol = 1e-4

// TestFixturesEqualReference runs each fixture checkpoint (prompt prefill,
// then greedy decode steps) through the host backend at every level this
// CPU supports and through the reference CPU backend: logits within
// logitTol, the same greedy tokens.
func TestFixturesEqualReference(t *testing.T) {
	for _, fx := range []string{"tiny-llama", "tiny-llama-fp8-channel", "tiny-llama-fp8-block", "tiny-mistral", "tiny-qwen2", "tiny-qwen3", "tiny-mixtral", "tiny-qwen3moe"} {
		dir := filepath.Join("..", "..", "testdata", fx)
		var ref testmodel.Reference
		testfile.ReadJSON(t, filepath.Join(dir, "reference.json"), &ref)
		prompt := ref.GreedyPrompt
		if len(ref.LongPrompt) > 0 {
			prompt = ref.LongPrompt
		}
		steps := 8
		dev := runtime.NewCPU(0)
		t.Cleanup(func() { dev.Close() })
		cb, err := kernels.NewCPUBackend(dev)
		if err != nil {
			t.Fatal(err)
		}
		want := testmodel.Run(t, testmodel.Load(t, models.Load, dir, dev), cb, prompt, steps)
		for _, l := range host.Levels() {
			t.Run(fmt.Sprintf("%s/%v", fx, l), func(t *testing.T) {
				hb, err := host.New(dev, host.Options{Level: l, Threads: 3})
				if err != nil {
					t.Fatal(err)
				}
				defer hb.Close()
				got := testmodel.Run(t, testmodel.Load(t, models.Load, dir, dev), hb, prompt, steps)
				if len(got) != len(want) {
					t.Fatalf("%d passes, want %d", len(got), len(want))
				}
				for p := range want {
					var mx, diff float64
					for i := range want[p] {
						mx = max(mx, math.Abs(float64(want[p][i])))
						diff = max(diff, math.Abs(float64(got[p][i]-want[p][i])))
					}
					if !(diff <= logitTol*(1+mx)) {
						t.Fatalf("pass %d: logits differ by %.3g (max |logit| %.3g)", p, diff, mx)
					}
					if a, b := kernels.Argmax(got[p]), kernels.Argmax(want[p]); a != b {
						t.Fatalf("pass %d: greedy token %d, reference %d", p, a, b)
					}
				}
				t.Logf("%d passes within %.0e", len(want), logitTol)
			})
		}
	}
}
