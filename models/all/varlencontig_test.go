package all_test

import (
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/runtime"
)

// packedRef is the CPU backend with a reference kernels.PackedPrefillAttender
// (VarlenPrefillAttention over the packed k, v rows as pools with
// kernels.PackedKV's layout), counting the calls it took.
type packedRef struct {
	*kernels.CPUBackend
	calls int
}

func (p *packedRef) PackedPrefillAttention(out, q, k, v *runtime.Tensor, qStarts []int32, window int) (bool, error) {
	if _, _, _, _, err := kernels.CheckPackedPrefill("packedRef", out, q, k, v, qStarts, window); err != nil {
		return false, err
	}
	p.calls++
	return true, p.CPUBackend.VarlenPrefillAttention(out, q, k, v, qStarts, kernels.PackedKV(qStarts), window)
}

var _ kernels.PackedPrefillAttender = (*packedRef)(nil)

// TestVarlenContigDispatch: for every family, ForwardBatch through a
// backend with packed prefill attention gives the paged path's logits bit
// for bit on sequences of mixed lengths joining and finishing at different
// steps, takes it once a layer in each forward with a fresh multi-token
// prompt (alone or with decode steps), and never in a forward where a
// prefill continues a cached sequence (a second chunk).
func TestVarlenContigDispatch(t *testing.T) {
	for _, fx := range batchFixtures {
		t.Run(fx.family, func(t *testing.T) {
			dev, b := cpu(t)
			cb := b.(*kernels.CPUBackend)
			m := load(t, fx.dir, dev)
			L := len(m.Layers)
			ps := plans(m.Cfg.VocabSize)
			run := func(be kernels.Backend) [][][]float32 {
				cache, err := m.NewPagedCache(b, 64, 4)
				if err != nil {
					t.Fatal(err)
				}
				defer cache.Close()
				return runBatched(t, m, be, cache, ps)
			}
			want := run(b)
			ref := &packedRef{CPUBackend: cb}
			got := run(ref)
			for i := range want {
				for s := range want[i] {
					if !slices.Equal(got[i][s], want[i][s]) {
						t.Errorf("sequence %d forward %d: logits differ with packed prefill attention", i, s)
					}
				}
			}
			// Fresh multi-token prompts join at steps 0, 2 and 3 (plans);
			// the last layer of each attends its returned rows alone, as
			// decode steps (decoder's lastrows.go).
			if ref.calls != 3*(L-1) {
				t.Errorf("%d packed calls, want one a layer but the last in each of the 3 forwards with fresh prompts = %d", ref.calls, 3*(L-1))
			}

			// A second chunk of a cached prompt beside a fresh one: the
			// forward is not all-fresh, so the paged path runs.
			chunks := func(be kernels.Backend) [][]float32 {
				cache, err := m.NewPagedCache(b, 64, 4)
				if err != nil {
					t.Fatal(err)
				}
				defer cache.Close()
				a, c := cache.NewSeq(), cache.NewSeq()
				defer a.Free()
				defer c.Free()
				ids := func(n, seed int) []int32 {
					out := make([]int32, n)
					for i := range out {
						out[i] = int32((seed*71 + i*13 + 5) % m.Cfg.VocabSize)
					}
					return out
				}
				var rows [][]float32
				for _, entries := range [][]decoder.BatchEntry{
					{{Seq: a, IDs: ids(6, 1)}},
					{{Seq: a, IDs: ids(5, 2)}, {Seq: c, IDs: ids(7, 3)}},
				} {
					lt, err := m.ForwardBatch(be, cache, entries)
					if err != nil {
						t.Fatal(err)
					}
					all := make([]float32, lt.NumElements())
					if err := be.ReadF32(all, lt); err != nil {
						t.Fatal(err)
					}
					rows = append(rows, all)
				}
				return rows
			}
			ref.calls = 0
			gotC, wantC := chunks(ref), chunks(b)
			if ref.calls != L-1 {
				t.Errorf("chunked run: %d packed calls, want %d (the first, fresh forward only; not its last layer)", ref.calls, L-1)
			}
			for s := range wantC {
				if !slices.Equal(gotC[s], wantC[s]) {
					t.Errorf("chunked run, forward %d: logits differ with packed prefill attention", s)
				}
			}
		})
	}
}
