package host

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// TestPagedAttentionEqualsReference: the host backend's paged decode
// and varlen prefill attentions give the reference's outputs
// (kernels.PagedAttention) within
// 2e-5 at every level and thread count, over sequences of lengths around
// the block size and longer, blocks scattered through the pool in no
// order, with and without a window, for grouped heads of several widths
// (four heads a group, one, three); and refuses what does not fit.
func TestPagedAttentionEqualsReference(t *testing.T) {
	dev := runtime.NewCPU(0)
	t.Cleanup(func() {
		if err := dev.Close(); err != nil {
			t.Error(err)
		}
	})
	r := rand.New(rand.NewPCG(7, 8))
	tensor := func(shape ...int) *runtime.Tensor {
		x, err := runtime.NewTensor(dev, runtime.F32, runtime.Shape(shape), "test")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { x.Buffer().Free() })
		for i := range x.F32() {
			x.F32()[i] = r.Float32()*2 - 1
		}
		return x
	}
	const B = 16
	lens := []int32{1, B - 1, B, B + 1, 3*B + 5, 300}
	var backends []*Backend
	for _, l := range Levels() {
		for _, th := range []int{1, 3} {
			b, err := New(dev, Options{Level: l, Threads: th})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			backends = append(backends, b)
		}
	}
	for _, c := range []struct{ H, K, d, window int }{{8, 2, 64, 0}, {32, 8, 128, 0}, {6, 6, 32, 0}, {12, 4, 48, 20}, {8, 2, 64, 40}} {
		// Each sequence's blocks, taken from a shuffled pool.
		maxBlocks := (int(lens[len(lens)-1]) + B - 1) / B
		blocks := 0
		for _, n := range lens {
			blocks += (int(n) + B - 1) / B
		}
		perm := r.Perm(blocks + 5)
		table := make([]int32, len(lens)*maxBlocks)
		next := 0
		for s, n := range lens {
			for k := 0; k < (int(n)+B-1)/B; k++ {
				table[s*maxBlocks+k] = int32(perm[next])
				next++
			}
		}
		kv := kernels.PagedKV{BlockSize: B, MaxBlocks: maxBlocks, BlockTable: table, SeqLens: lens}
		P := (blocks + 5) * B
		kp, vp := tensor(P, c.K, c.d), tensor(P, c.K, c.d)
		// Decode: one query a sequence. Prefill: each sequence's last
		// queries, from one to all of its positions.
		decode := make([]int32, len(lens)+1)
		prefill := make([]int32, len(lens)+1)
		for i, n := range lens {
			decode[i+1] = int32(i + 1)
			prefill[i+1] = prefill[i] + min(n, int32(1+3*i))
			if i == 2 {
				prefill[i+1] = prefill[i] + n // every position of a whole block
			}
		}
		for _, starts := range [][]int32{decode, prefill} {
			T := int(starts[len(lens)])
			q := tensor(T, c.H, c.d)
			want := tensor(T, c.H, c.d)
			if err := kernels.PagedAttention(want.F32(), q.F32(), kp.F32(), vp.F32(), starts, kv, c.H, c.K, c.d, c.window); err != nil {
				t.Fatal(err)
			}
			for _, b := range backends {
				name := fmt.Sprintf("%v/%d threads/H%d K%d d%d window %d/%d queries", b.e.Level(), b.e.Threads(), c.H, c.K, c.d, c.window, T)
				got := tensor(T, c.H, c.d)
				var err error
				if T == len(lens) {
					err = b.PagedDecodeAttention(got, q, kp, vp, kv, c.window)
				} else {
					err = b.VarlenPrefillAttention(got, q, kp, vp, starts, kv, c.window)
				}
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				var worst float64
				for i, w := range want.F32() {
					worst = max(worst, math.Abs(float64(got.F32()[i]-w)))
				}
				if !(worst <= 2e-5) {
					t.Errorf("%s: outputs differ from the reference's by %.3g", name, worst)
				}
			}
		}
	}

	b := backends[len(backends)-1]
	kv := kernels.PagedKV{BlockSize: B, MaxBlocks: 1, BlockTable: []int32{0}, SeqLens: []int32{3}}
	q, kp := tensor(1, 8, 64), tensor(B, 2, 64)
	for _, c := range []struct {
		name         string
		out, q, k, v *runtime.Tensor
		kv           kernels.PagedKV
		window       int
		starts       []int32 // VarlenPrefillAttention's; nil: PagedDecodeAttention
		want         string
	}{
		{"two queries for one sequence", tensor(2, 8, 64), tensor(2, 8, 64), kp, kp, kv, 0, nil, "2 queries for 1 sequences"},
		{"heads not a multiple", tensor(1, 6, 64), tensor(1, 6, 64), tensor(B, 4, 64), tensor(B, 4, 64), kv, 0, nil, "heads a multiple"},
		{"pools of different shapes", tensor(1, 8, 64), q, kp, tensor(B, 2, 32), kv, 0, nil, "want [T,H,d] and [P,K,d]"},
		{"negative window", tensor(1, 8, 64), q, kp, kp, kv, -1, nil, "window -1"},
		{"a block outside the pool", tensor(1, 8, 64), q, kp, kp, kernels.PagedKV{BlockSize: B, MaxBlocks: 1, BlockTable: []int32{4}, SeqLens: []int32{3}}, 0, nil, "host.PagedDecodeAttention"},
		{"query starts short of q", tensor(1, 8, 64), q, kp, kp, kv, 0, []int32{0, 0}, "cover 0 rows, q has 1"},
		{"more queries than positions", tensor(4, 8, 64), tensor(4, 8, 64), kp, kp, kv, 0, []int32{0, 4}, "host.VarlenPrefillAttention"},
	} {
		var err error
		if c.starts != nil {
			err = b.VarlenPrefillAttention(c.out, c.q, c.k, c.v, c.starts, c.kv, c.window)
		} else {
			err = b.PagedDecodeAttention(c.out, c.q, c.k, c.v, c.kv, c.window)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
}
