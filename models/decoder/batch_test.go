package decoder_test

import (
	"testing"

	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/nn"
)

// countHook counts enters per module name.
type countHook struct{ n map[string]int }

func (h *countHook) Enter(m nn.Module) error           { h.n[m.Node().Name()]++; return nil }
func (h *countHook) Exit(_ nn.Module, err error) error { return err }

// TestForwardBatchOnePassPerLayer: a batched forward of several sequences
// (prefills and decode steps) enters the model, each layer and each
// layer's attention exactly once, as the offload engine's traps need to
// serve the whole batch with one weight stream.
func TestForwardBatchOnePassPerLayer(t *testing.T) {
	m, b, _ := loadTiny(t)
	cache, err := m.NewPagedCache(b, 16, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	s1, s2, s3 := cache.NewSeq(), cache.NewSeq(), cache.NewSeq()
	if _, err := m.ForwardBatch(b, cache, []decoder.BatchEntry{{Seq: s1, IDs: []int32{5, 6, 7}}}); err != nil {
		t.Fatal(err)
	}
	h := &countHook{n: map[string]int{}}
	remove := m.Node().Tree().AddHook(h)
	defer remove()
	lt, err := m.ForwardBatch(b, cache, []decoder.BatchEntry{
		{Seq: s2, IDs: []int32{1, 2, 3, 4}}, {Seq: s1, IDs: []int32{9}}, {Seq: s3, IDs: []int32{8, 2}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if lt.Dim(0) != 3 {
		t.Errorf("logits %v, want a row per entry", lt.Shape())
	}
	if h.n[m.Node().Name()] != 1 {
		t.Errorf("model entered %d times", h.n[m.Node().Name()])
	}
	for _, l := range m.Layers {
		if h.n[l.Node().Name()] != 1 || h.n[l.Attn.Node().Name()] != 1 || h.n[l.MLP.Node().Name()] != 1 {
			t.Errorf("%s: entered %d times, its attention %d, its MLP %d; want once each", l.Node().Name(),
				h.n[l.Node().Name()], h.n[l.Attn.Node().Name()], h.n[l.MLP.Node().Name()])
		}
	}
	if s1.Len() != 4 || s2.Len() != 4 || s3.Len() != 2 {
		t.Errorf("lengths %d, %d, %d after the forward; want 4, 4, 2", s1.Len(), s2.Len(), s3.Len())
	}
}
