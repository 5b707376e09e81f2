package all_test

import (
	"fmt"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// mergingCPU is the CPU backend with the merged GEMMs of a GPU backend
// (kernels.MergedMatMuler, kernels.MergedGateUpSiLUer): where the weights
// are adjacent it multiplies x by the one matrix they form together (a
// view over all of them, which holds the right rows only if they really
// are back to back) into a scratch and splits its columns; where they are
// not, it says it did not run. It counts both and the fewest rows of a call.
type mergingCPU struct {
	*kernels.CPUBackend
	qkvRan, qkvNot, guRan, guNot int
	kvRan                        int // of qkvRan: calls of two weights (a last layer's k and v)
	minRows                      int
}

// merged runs x·[ΣN,D]ᵀ over the adjacent ws into a fresh [T,ΣN] scratch.
func (b *mergingCPU) merged(x *runtime.Tensor, ws []*runtime.Tensor, dt runtime.DType) (*runtime.Tensor, int, error) {
	N, D := 0, ws[0].Dim(1)
	for _, w := range ws {
		N += w.Dim(0)
	}
	all, err := runtime.TensorOn(ws[0].Buffer(), ws[0].Offset(), ws[0].DType(), runtime.Shape{N, D})
	if err != nil {
		return nil, 0, err
	}
	T := x.NumElements() / D
	if b.minRows == 0 || T < b.minRows {
		b.minRows = T
	}
	s, err := runtime.NewTensor(b.Device(), dt, runtime.Shape{T, N}, "merged scratch")
	if err != nil {
		return nil, 0, err
	}
	return s, T, b.MatMul(s, x, all)
}

// cols copies columns [c0, c0+n) of s [T,N] to out [T,n].
func cols(out, s *runtime.Tensor, T, c0, n int) {
	es := s.DType().Size()
	N := s.NumElements() / T
	src, dst := s.Bytes(), out.Bytes()
	for t := 0; t < T; t++ {
		copy(dst[t*n*es:(t+1)*n*es], src[(t*N+c0)*es:(t*N+c0+n)*es])
	}
}

func (b *mergingCPU) MatMulMerged(outs []*runtime.Tensor, x *runtime.Tensor, ws []*runtime.Tensor) (bool, error) {
	if !kernels.Adjacent(ws) {
		b.qkvNot++
		return false, nil
	}
	b.qkvRan++
	if len(ws) == 2 {
		b.kvRan++
	}
	s, T, err := b.merged(x, ws, outs[0].DType())
	if err != nil {
		return false, err
	}
	defer s.Buffer().Free()
	c0 := 0
	for i, o := range outs {
		cols(o, s, T, c0, ws[i].Dim(0))
		c0 += ws[i].Dim(0)
	}
	return true, nil
}

func (b *mergingCPU) GateUpSiLUMerged(out, x, wg, wu *runtime.Tensor) (bool, error) {
	ws := []*runtime.Tensor{wg, wu}
	if !kernels.Adjacent(ws) {
		b.guNot++
		return false, nil
	}
	b.guRan++
	s, T, err := b.merged(x, ws, out.DType())
	if err != nil {
		return false, err
	}
	defer s.Buffer().Free()
	I := wg.Dim(0)
	u, err := runtime.NewTensor(b.Device(), out.DType(), out.Shape(), "up")
	if err != nil {
		return false, err
	}
	defer u.Buffer().Free()
	cols(out, s, T, 0, I)
	cols(u, s, T, I, I)
	return true, b.SiLUMul(out, out, u)
}

// TestMergedGEMMWiring: a batched run (prefills of 1..23 tokens, decode
// steps of 1..6 sequences) on a model offloaded onto a CPU compute device
// with every layer resident, through a backend with merged GEMMs:
//   - Llama's q, k, v and gate, up are packed back to back in each layer's
//     unit: every call of 2 rows or more merges them, one-token forwards
//     never call;
//   - Qwen2 has q, k and v biases between the weights: q/k/v are not
//     adjacent and fall back to three GEMMs (biases added after), gate and
//     up still merge;
//   - loaded without the offload engine (one allocation per tensor) nothing
//     is adjacent and everything falls back;
//   - the last layer of a forward returning fewer rows than it packs (its
//     queries made for those rows alone) merges k and v where they are
//     adjacent (Llama), not across Qwen2's biases;
//
// and every forward's logits are those of each sequence alone on the plain
// CPU backend within 1e-5.
func TestMergedGEMMWiring(t *testing.T) {
	for _, fx := range []struct {
		dir, family string
		qkvMerges   bool
	}{{"../../testdata/tiny-llama", "llama", true}, {"../../testdata/tiny-qwen2", "qwen2", false}} {
		t.Run(fx.family, func(t *testing.T) {
			host, hb := cpu(t)
			resident := load(t, fx.dir, host)
			ps := plans(resident.Cfg.VocabSize)
			want := runAlone(t, resident, hb, ps)
			L := resident.Cfg.NumHiddenLayers
			// Every layer alike: the last layer of a forward returning
			// fewer rows than it packs would make those rows' queries
			// alone (decoder's lastrows.go; TestBatchLastLayerRows).
			resident.FullLastLayer = true

			t.Run("not adjacent", func(t *testing.T) {
				mb := &mergingCPU{CPUBackend: hb.(*kernels.CPUBackend)}
				cache, err := resident.NewPagedCache(mb, 64, 4)
				if err != nil {
					t.Fatal(err)
				}
				defer cache.Close()
				checkBatched(t, runBatched(t, resident, mb, cache, ps), want)
				if mb.qkvRan != 0 || mb.guRan != 0 || mb.qkvNot == 0 || mb.qkvNot != mb.guNot || mb.qkvNot%L != 0 {
					t.Errorf("one allocation per tensor: q/k/v merged %d, not %d; gate/up merged %d, not %d; want none merged, a multiple of %d layers not",
						mb.qkvRan, mb.qkvNot, mb.guRan, mb.guNot, L)
				}
			})

			t.Run("offloaded resident", func(t *testing.T) {
				_, fixed, total := unitBytes(t, resident)
				dev, cb := offloadDevice(t)
				defer dev.Close()
				m := load(t, fx.dir, host)
				m.FullLastLayer = true
				name := fmt.Sprintf("%s-%s", t.Name(), fx.family)
				cfg := offload.DefaultConfig(dev)
				cfg.GPUBudget = offload.Budget{Bytes: fixed + total + 1<<20}
				cfg.OffloadTiming = offload.TimingEager
				_, release := offloadAs(t, m, &cfg, name)
				defer release()
				mb := &mergingCPU{CPUBackend: cb}
				cache, err := m.NewPagedCache(mb, 64, 4)
				if err != nil {
					t.Fatal(err)
				}
				defer cache.Close()
				checkBatched(t, runBatched(t, m, mb, cache, ps), want)
				if n := len(offload.OffloadUnits(name)); n != 0 {
					t.Fatalf("%d layers streamed, want all resident", n)
				}
				t.Logf("q/k/v merged %d, not %d; gate/up merged %d, not %d; fewest rows %d", mb.qkvRan, mb.qkvNot, mb.guRan, mb.guNot, mb.minRows)
				calls := mb.guRan // every multi-token forward: one per layer
				if calls == 0 || calls%L != 0 || mb.guNot != 0 {
					t.Errorf("gate/up merged %d times, not %d: want a positive multiple of %d layers, none not", mb.guRan, mb.guNot, L)
				}
				if fx.qkvMerges && (mb.qkvRan != calls || mb.qkvNot != 0) {
					t.Errorf("q/k/v merged %d times, not %d: want %d, none not", mb.qkvRan, mb.qkvNot, calls)
				}
				if !fx.qkvMerges && (mb.qkvRan != 0 || mb.qkvNot != calls) {
					t.Errorf("q/k/v (biases between the weights) merged %d times, not %d: want none, %d not", mb.qkvRan, mb.qkvNot, calls)
				}
				if mb.minRows < 2 {
					t.Errorf("a merged call of %d rows: one-token forwards must not call it", mb.minRows)
				}

				// The last layer making its returned rows' queries alone
				// merges its keys' and values' GEMMs where they are back to
				// back (Llama's units), else makes them one by one (Qwen2's
				// biases lie between).
				m.FullLastLayer = false
				kb := &mergingCPU{CPUBackend: cb}
				kc, err := m.NewPagedCache(kb, 64, 4)
				if err != nil {
					t.Fatal(err)
				}
				defer kc.Close()
				checkBatched(t, runBatched(t, m, kb, kc, ps), want)
				if fx.qkvMerges && kb.kvRan == 0 {
					t.Errorf("the last layer's k and v never merged (q/k/v merged %d, not %d)", kb.qkvRan, kb.qkvNot)
				}
				if !fx.qkvMerges && kb.kvRan != 0 {
					t.Errorf("k and v merged %d times with biases between them", kb.kvRan)
				}
			})
		})
	}
}
