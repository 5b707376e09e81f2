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

// TestRoPEStoreKVAt: tokens at unrelated positions and pool rows get
// exactly the values of RoPE at each one's position and StoreKV at each
// one's row; every other pool row is untouched; bad positions, slots and
// shapes are errors naming them.
func TestRoPEStoreKVAt(t *testing.T) {
	const H, K, d, P = 4, 2, 8, 40
	r := rand.New(rand.NewPCG(3, 9))
	b, tensor := cpuF32(t)
	inv, err := RopeInvFreq(d, 10000, RopeScaling{})
	if err != nil {
		t.Fatal(err)
	}
	positions := []int32{0, 7, 3, 100, 4, 5}
	slots := []int32{39, 0, 12, 13, 5, 6}
	T := len(positions)
	q, k, v := randF32(r, T*H*d), randF32(r, T*K*d), randF32(r, T*K*d)
	kp0, vp0 := randF32(r, P*K*d), randF32(r, P*K*d)
	qt, kt, vt := tensor(q, T, H, d), tensor(k, T, K, d), tensor(v, T, K, d)
	kpt, vpt := tensor(kp0, P, K, d), tensor(vp0, P, K, d)
	if err := b.RoPEStoreKVAt(qt, kt, vt, kpt, vpt, positions, slots, inv); err != nil {
		t.Fatal(err)
	}
	wantK, wantV := slices.Clone(kp0), slices.Clone(vp0)
	row := K * d
	for i := range T {
		qi, ki := tensor(q[i*H*d:(i+1)*H*d], 1, H, d), tensor(k[i*row:(i+1)*row], 1, K, d)
		if err := b.RoPE(qi, int(positions[i]), inv); err != nil {
			t.Fatal(err)
		}
		if err := b.RoPE(ki, int(positions[i]), inv); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(qt.F32()[i*H*d:(i+1)*H*d], qi.F32()) || !slices.Equal(kt.F32()[i*row:(i+1)*row], ki.F32()) {
			t.Errorf("token %d: rotated q or k differs from RoPE at position %d", i, positions[i])
		}
		copy(wantK[int(slots[i])*row:], ki.F32())
		copy(wantV[int(slots[i])*row:], v[i*row:(i+1)*row])
	}
	if !slices.Equal(kpt.F32(), wantK) || !slices.Equal(vpt.F32(), wantV) {
		t.Errorf("pools differ from StoreKV at each token's row")
	}
	for _, tc := range []struct {
		name       string
		pos, slots []int32
		want       string
	}{
		{"negative position", []int32{0, -1, 3, 100, 4, 5}, slots, "token 1 at position -1"},
		{"slot past the pool", positions, []int32{39, 0, 12, 40, 5, 6}, "token 3 goes to pool row 40 of 40"},
		{"too few slots", positions, slots[:5], "6 positions and 5 slots for 6 tokens"},
	} {
		err := b.RoPEStoreKVAt(qt, kt, vt, kpt, vpt, tc.pos, tc.slots, inv)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	if err := b.RoPEStoreKVAt(qt, kt, vt, kpt, vpt, positions, slots, inv[:1]); err == nil || !strings.Contains(err.Error(), "frequencies") {
		t.Errorf("short frequency table: error %v", err)
	}
}

// TestRoPEStoreKVAtHalves: RoPEStoreKVAt with q left out rotates and stores
// the keys and values as the whole call does; with k, v and the pools left
// out it rotates q alone as the whole call does (no slots needed); other
// mixes of nil tensors are errors naming them.
func TestRoPEStoreKVAtHalves(t *testing.T) {
	const H, K, d, P = 4, 2, 8, 40
	r := rand.New(rand.NewPCG(5, 2))
	b, tensor := cpuF32(t)
	inv, err := RopeInvFreq(d, 10000, RopeScaling{})
	if err != nil {
		t.Fatal(err)
	}
	positions := []int32{3, 0, 511, 8}
	slots := []int32{2, 30, 39, 7}
	T := len(positions)
	q, k, v := randF32(r, T*H*d), randF32(r, T*K*d), randF32(r, T*K*d)
	kp0, vp0 := randF32(r, P*K*d), randF32(r, P*K*d)
	whole := []*runtime.Tensor{tensor(q, T, H, d), tensor(k, T, K, d), tensor(v, T, K, d), tensor(kp0, P, K, d), tensor(vp0, P, K, d)}
	if err := b.RoPEStoreKVAt(whole[0], whole[1], whole[2], whole[3], whole[4], positions, slots, inv); err != nil {
		t.Fatal(err)
	}
	kvOnly := []*runtime.Tensor{tensor(k, T, K, d), tensor(v, T, K, d), tensor(kp0, P, K, d), tensor(vp0, P, K, d)}
	if err := b.RoPEStoreKVAt(nil, kvOnly[0], kvOnly[1], kvOnly[2], kvOnly[3], positions, slots, inv); err != nil {
		t.Fatalf("q left out: %v", err)
	}
	for i, n := range []string{"k", "v", "k pool", "v pool"} {
		if !slices.Equal(kvOnly[i].F32(), whole[i+1].F32()) {
			t.Errorf("q left out: %s differs from the whole call's", n)
		}
	}
	qOnly := tensor(q, T, H, d)
	if err := b.RoPEStoreKVAt(qOnly, nil, nil, nil, nil, positions, nil, inv); err != nil {
		t.Fatalf("k, v and the pools left out: %v", err)
	}
	if !slices.Equal(qOnly.F32(), whole[0].F32()) {
		t.Errorf("k, v and the pools left out: q differs from the whole call's")
	}
	if slices.Equal(qOnly.F32(), q) {
		t.Errorf("q alone was not rotated")
	}
	for _, tc := range []struct {
		name string
		args []*runtime.Tensor
		want string
	}{
		{"everything nil", []*runtime.Tensor{nil, nil, nil, nil, nil}, "all nil"},
		{"v without k", []*runtime.Tensor{qOnly, nil, kvOnly[1], kvOnly[2], kvOnly[3]}, "k is nil"},
		{"no v pool", []*runtime.Tensor{nil, kvOnly[0], kvOnly[1], kvOnly[2], nil}, "v pool is nil"},
	} {
		err := b.RoPEStoreKVAt(tc.args[0], tc.args[1], tc.args[2], tc.args[3], tc.args[4], positions, slots, inv)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	if err := b.RoPEStoreKVAt(qOnly, nil, nil, nil, nil, positions[:3], nil, inv); err == nil || !strings.Contains(err.Error(), "3 positions") {
		t.Errorf("q alone with too few positions: error %v", err)
	}
}
