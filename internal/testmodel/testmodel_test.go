package testmodel_test

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/models/llama"
	"github.com/flextensor-go/flextensor/runtime"
)

const tinyDir = "../../testdata/tiny-llama"

// TestStepsAndGreedy: Greedy gives steps+1 vocabulary-wide rows, the first
// the prefill's last-position logits (Forward), each later one the logits
// after feeding the argmax of the row before, as Steps with a caller's
// token choice over the same tokens gives.
func TestStepsAndGreedy(t *testing.T) {
	d := devtest.NewCPU(t)
	m := testmodel.Load(t, llama.Load, tinyDir, d.Dev)
	prompt, steps := []int32{5, 17, 42}, 4
	got := testmodel.Run(t, m, d.Backend, prompt, steps)
	if len(got) != steps+1 {
		t.Fatalf("%d rows, want %d", len(got), steps+1)
	}
	if first := testmodel.Forward(t, m, d.Backend, prompt, false); !slices.Equal(got[0], first) {
		t.Errorf("first row is not the prefill's logits")
	}
	var fed []int32
	cache, err := m.NewKVCache(d.Backend, len(prompt)+steps)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Free()
	again, err := testmodel.Steps(m, d.Backend, cache, prompt, steps, func(s int, logits []float32) int32 {
		id := testmodel.Argmax(s, logits)
		fed = append(fed, id)
		return id
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(fed) != steps {
		t.Errorf("next called %d times, want %d", len(fed), steps)
	}
	for i := range got {
		if len(got[i]) != m.Cfg.VocabSize || !slices.Equal(got[i], again[i]) {
			t.Errorf("row %d: %d logits, equal to Steps' %v", i, len(got[i]), slices.Equal(got[i], again[i]))
		}
	}
	if cache.Len() != len(prompt)+steps {
		t.Errorf("cache holds %d positions, want %d", cache.Len(), len(prompt)+steps)
	}
}

// TestWriteCheckpoint: the tensors written read back by name, shape and
// bytes.
func TestWriteCheckpoint(t *testing.T) {
	data := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	ck := testmodel.WriteCheckpoint(t, []loader.NamedTensor{{Name: "w", DType: runtime.F32, Shape: runtime.Shape{2}, Data: data}})
	if !slices.Equal(ck.Names(), []string{"w"}) || filepath.Base(ck.Dir()) == "." {
		t.Errorf("checkpoint in %q holds %v, want [w]", ck.Dir(), ck.Names())
	}
	info, err := ck.Info("w")
	if err != nil {
		t.Fatal(err)
	}
	b, err := ck.Bytes("w")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(info.Shape, []int{2}) || info.DType != runtime.F32 || !slices.Equal(b, data) {
		t.Errorf("read back %+v, bytes %v", info, b)
	}
}
