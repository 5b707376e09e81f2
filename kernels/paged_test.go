package kernels

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// pagedSeq is one sequence of a paged-attention case: nq new queries at the
// end of ctx positions.
type pagedSeq struct{ nq, ctx int }

// TestPagedAttentionEqualsContiguous: packed sequences of mixed lengths
// (prefill from 0, a chunk after a cached prefix, decode steps) over a pool
// whose blocks are shuffled give, for every window, each sequence's
// AttentionWindow over its own contiguous cache bit for bit, through
// VarlenPrefillAttention and (one query each) PagedDecodeAttention.
func TestPagedAttentionEqualsContiguous(t *testing.T) {
	const H, K, d, bs = 4, 2, 8, 4
	r := rand.New(rand.NewPCG(7, 7))
	dev := runtime.NewCPU(0)
	defer dev.Close()
	b, err := NewCPUBackend(dev)
	if err != nil {
		t.Fatal(err)
	}
	for _, window := range []int{0, 3, 8} {
		for _, seqs := range [][]pagedSeq{
			{{5, 5}, {1, 9}, {3, 12}, {1, 1}, {7, 7}},
			{{1, 4}, {1, 17}, {1, 2}},
		} {
			t.Run(fmt.Sprint(window, seqs), func(t *testing.T) {
				row := K * d
				maxBlocks := 0
				total := 0
				for _, s := range seqs {
					maxBlocks = max(maxBlocks, (s.ctx+bs-1)/bs)
					total += (s.ctx + bs - 1) / bs
				}
				poolBlocks := total + 3
				perm := r.Perm(poolBlocks) // blocks handed out in a scrambled order
				kPool, vPool := randF32(r, poolBlocks*bs*row), randF32(r, poolBlocks*bs*row)
				kv := PagedKV{BlockSize: bs, MaxBlocks: maxBlocks, BlockTable: make([]int32, len(seqs)*maxBlocks)}
				qStarts := []int32{0}
				var q []float32
				var want []float32
				next := 0
				for i, s := range seqs {
					kc, vc := make([]float32, s.ctx*row), make([]float32, s.ctx*row)
					for blk := range (s.ctx + bs - 1) / bs {
						kv.BlockTable[i*maxBlocks+blk] = int32(perm[next])
						next++
					}
					for p := range s.ctx {
						slot := int(kv.BlockTable[i*maxBlocks+p/bs])*bs + p%bs
						copy(kc[p*row:(p+1)*row], kPool[slot*row:])
						copy(vc[p*row:(p+1)*row], vPool[slot*row:])
					}
					qs := randF32(r, s.nq*H*d)
					o := make([]float32, len(qs))
					if err := AttentionWindow(o, qs, kc, vc, s.nq, s.ctx-s.nq, H, K, d, window, nil); err != nil {
						t.Fatal(err)
					}
					q, want = append(q, qs...), append(want, o...)
					qStarts = append(qStarts, qStarts[i]+int32(s.nq))
					kv.SeqLens = append(kv.SeqLens, int32(s.ctx))
				}
				T := int(qStarts[len(seqs)])
				tensor := func(v []float32, shape ...int) *runtime.Tensor {
					tt, err := runtime.NewTensor(dev, runtime.F32, shape, "test")
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(tt.Buffer().Free)
					copy(tt.F32(), v)
					return tt
				}
				qt, out := tensor(q, T, H, d), tensor(nil, T, H, d)
				kt, vt := tensor(kPool, poolBlocks*bs, K, d), tensor(vPool, poolBlocks*bs, K, d)
				if err := b.VarlenPrefillAttention(out, qt, kt, vt, qStarts, kv, window); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(out.F32(), want) {
					t.Errorf("varlen: differs from per-sequence attention")
				}
				if T == len(seqs) {
					clear(out.F32())
					if err := b.PagedDecodeAttention(out, qt, kt, vt, kv, window); err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(out.F32(), want) {
						t.Errorf("decode: differs from per-sequence attention")
					}
				}
			})
		}
	}
}

// TestPagedAttentionBadInput: inconsistent layouts are errors naming the
// problem.
func TestPagedAttentionBadInput(t *testing.T) {
	const H, K, d, bs = 2, 1, 4, 2
	pool := make([]float32, 4*bs*K*d)
	q := make([]float32, 3*H*d)
	out := make([]float32, len(q))
	good := PagedKV{BlockSize: bs, MaxBlocks: 2, BlockTable: []int32{0, 1, 2, 3}, SeqLens: []int32{2, 3}}
	for _, tc := range []struct {
		name    string
		starts  []int32
		kv      PagedKV
		window  int
		wantErr string
	}{
		{"starts", []int32{0, 1}, good, 0, "query starts"},
		{"more queries than positions", []int32{0, 3, 3}, good, 0, "3 queries and 2 positions"},
		{"block outside the pool", []int32{0, 1, 3}, PagedKV{BlockSize: bs, MaxBlocks: 2, BlockTable: []int32{0, 9, 2, 3}, SeqLens: []int32{3, 3}}, 0, "block 9 of a pool of 4"},
		{"too long for the table", []int32{0, 1, 3}, PagedKV{BlockSize: bs, MaxBlocks: 2, BlockTable: []int32{0, 1, 2, 3}, SeqLens: []int32{5, 3}}, 0, "more than 2 blocks"},
		{"negative window", []int32{0, 1, 3}, good, -1, "negative"},
	} {
		err := PagedAttention(out, q, pool, pool, tc.starts, tc.kv, H, K, d, tc.window)
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.wantErr)
		}
	}
	if err := PagedAttention(out, q, pool, pool, []int32{0, 1, 3}, good, H, K, d, 0); err != nil {
		t.Errorf("good layout: %v", err)
	}
}
