package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// TestProjectRoPEStoreKVCPU: the CPU op leaves in q, k, v and the caches
// the projections (with their biases, where given), q and k rotated at the
// position (rotate-half pairs (i, i+d/2), checked against float64
// arithmetic written out here) and the rotated k and v in the cache row of
// the position, every other cache row untouched; at GQA ratios 1 and 4, a
// llama3-scaled table, positions 0 and the last row. Bad operands are
// errors naming what is wrong.
func TestProjectRoPEStoreKVCPU(t *testing.T) {
	b, tensor := cpuF32(t)
	r := rand.New(rand.NewPCG(5, 21))
	for _, c := range []struct {
		H, KV, d, D, C, pos int
		bias                bool
		scaling             RopeScaling
	}{
		{4, 4, 8, 24, 5, 0, false, RopeScaling{}},
		{8, 2, 16, 32, 9, 8, true, RopeScaling{}},
		{4, 1, 8, 16, 40, 37, true, RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 32}},
	} {
		t.Run(fmt.Sprintf("H%d_KV%d_d%d_pos%d", c.H, c.KV, c.d, c.pos), func(t *testing.T) {
			inv, err := RopeInvFreq(c.d, 10000, c.scaling)
			if err != nil {
				t.Fatal(err)
			}
			Nq, Nkv := c.H*c.d, c.KV*c.d
			x := randF32(r, c.D)
			wq, wk, wv := randF32(r, Nq*c.D), randF32(r, Nkv*c.D), randF32(r, Nkv*c.D)
			bq, bk, bv := randF32(r, Nq), randF32(r, Nkv), randF32(r, Nkv)
			kc0, vc0 := randF32(r, c.C*Nkv), randF32(r, c.C*Nkv)
			a := QKVRoPE{Q: tensor(nil, 1, c.H, c.d), K: tensor(nil, 1, c.KV, c.d), V: tensor(nil, 1, c.KV, c.d), X: tensor(x, 1, c.D),
				WQ: tensor(wq, Nq, c.D), WK: tensor(wk, Nkv, c.D), WV: tensor(wv, Nkv, c.D),
				KCache: tensor(kc0, c.C, c.KV, c.d), VCache: tensor(vc0, c.C, c.KV, c.d), Pos: c.pos, InvFreq: inv}
			if c.bias {
				a.BQ, a.BK, a.BV = tensor(bq, Nq), tensor(bk, Nkv), tensor(bv, Nkv)
			}
			if ran, err := b.ProjectRoPEStoreKV(a); err != nil || !ran {
				t.Fatalf("ran %v, %v", ran, err)
			}
			proj := func(w, bias []float32, N int) []float64 {
				y := make([]float64, N)
				for n := range y {
					for j := range c.D {
						y[n] += float64(x[j]) * float64(w[n*c.D+j])
					}
					if c.bias {
						y[n] += float64(bias[n])
					}
				}
				return y
			}
			rotate := func(y []float64, heads int) []float64 {
				out := slices.Clone(y)
				half := c.d / 2
				for h := range heads {
					for i := range half {
						th := float64(float32(c.pos) * inv[i])
						a, b := y[h*c.d+i], y[h*c.d+i+half]
						out[h*c.d+i] = a*math.Cos(th) - b*math.Sin(th)
						out[h*c.d+i+half] = b*math.Cos(th) + a*math.Sin(th)
					}
				}
				return out
			}
			wantQ, wantK, wantV := rotate(proj(wq, bq, Nq), c.H), rotate(proj(wk, bk, Nkv), c.KV), proj(wv, bv, Nkv)
			checkClose(t, "q", a.Q.F32(), wantQ, 1e-5, 1e-5)
			checkClose(t, "k", a.K.F32(), wantK, 1e-5, 1e-5)
			checkClose(t, "v", a.V.F32(), wantV, 1e-5, 1e-5)
			kc, vc := a.KCache.F32(), a.VCache.F32()
			if !slices.Equal(kc[c.pos*Nkv:(c.pos+1)*Nkv], a.K.F32()) || !slices.Equal(vc[c.pos*Nkv:(c.pos+1)*Nkv], a.V.F32()) {
				t.Errorf("cache row %d is not the rotated k and v", c.pos)
			}
			for p := range c.C {
				if p != c.pos && (!slices.Equal(kc[p*Nkv:(p+1)*Nkv], kc0[p*Nkv:(p+1)*Nkv]) || !slices.Equal(vc[p*Nkv:(p+1)*Nkv], vc0[p*Nkv:(p+1)*Nkv])) {
					t.Errorf("cache row %d changed (the step writes row %d)", p, c.pos)
				}
			}
		})
	}

	t.Run("bad operands", func(t *testing.T) {
		const H, KV, d, D, C = 4, 2, 8, 16, 6
		inv, err := RopeInvFreq(d, 10000, RopeScaling{})
		if err != nil {
			t.Fatal(err)
		}
		good := func() QKVRoPE {
			return QKVRoPE{Q: tensor(nil, 1, H, d), K: tensor(nil, 1, KV, d), V: tensor(nil, 1, KV, d), X: tensor(nil, 1, D),
				WQ: tensor(nil, H*d, D), WK: tensor(nil, KV*d, D), WV: tensor(nil, KV*d, D),
				KCache: tensor(nil, C, KV, d), VCache: tensor(nil, C, KV, d), Pos: 2, InvFreq: inv}
		}
		if _, err := b.ProjectRoPEStoreKV(good()); err != nil {
			t.Fatalf("good operands: %v", err)
		}
		for _, tc := range []struct {
			name string
			edit func(*QKVRoPE)
			want string
		}{
			{"nil v weight", func(a *QKVRoPE) { a.WV = nil }, "v weight is nil"},
			{"two tokens", func(a *QKVRoPE) {
				a.Q, a.K, a.V = tensor(nil, 2, H, d), tensor(nil, 2, KV, d), tensor(nil, 2, KV, d)
			}, "want [1,H,d]"},
			{"cache heads", func(a *QKVRoPE) { a.KCache, a.VCache = tensor(nil, C, 1, 2*d), tensor(nil, C, 1, 2*d) }, "[C,KV,d]"},
			{"k weight width", func(a *QKVRoPE) { a.WK = tensor(nil, KV*d, D+8) }, "k weight [16 24], want [16,16]"},
			{"q bias", func(a *QKVRoPE) { a.BQ = tensor(nil, H*d-1) }, "q bias [31], want 32 values"},
			{"frequencies", func(a *QKVRoPE) { a.InvFreq = inv[:2] }, "4 frequencies"},
			{"position past the cache", func(a *QKVRoPE) { a.Pos = C }, "position 6 outside the cache's 6 rows"},
			{"negative position", func(a *QKVRoPE) { a.Pos = -1 }, "position -1"},
			{"x of two rows", func(a *QKVRoPE) { a.X = tensor(nil, 2, D) }, "one token"},
		} {
			a := good()
			tc.edit(&a)
			_, err := b.ProjectRoPEStoreKV(a)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
			}
		}
	})
}

// TestRoPEQK: RoPEQK rotates q and k exactly as two RoPE calls from the
// same position do (bit for bit, GQA shapes), and a bad k is an error
// naming RoPE's operand after q was rotated.
func TestRoPEQK(t *testing.T) {
	b, tensor := cpuF32(t)
	r := rand.New(rand.NewPCG(9, 2))
	const T, H, KV, d, pos = 3, 4, 2, 8, 11
	inv, err := RopeInvFreq(d, 10000, RopeScaling{})
	if err != nil {
		t.Fatal(err)
	}
	qv, kv := randF32(r, T*H*d), randF32(r, T*KV*d)
	q, k := tensor(qv, T, H, d), tensor(kv, T, KV, d)
	wq, wk := tensor(qv, T, H, d), tensor(kv, T, KV, d)
	if err := RoPEQK(b, q, k, pos, inv); err != nil {
		t.Fatal(err)
	}
	if err := b.RoPE(wq, pos, inv); err != nil {
		t.Fatal(err)
	}
	if err := b.RoPE(wk, pos, inv); err != nil {
		t.Fatal(err)
	}
	for i := range q.F32() {
		if math.Float32bits(q.F32()[i]) != math.Float32bits(wq.F32()[i]) {
			t.Fatalf("q[%d] = %v, want %v", i, q.F32()[i], wq.F32()[i])
		}
	}
	for i := range k.F32() {
		if math.Float32bits(k.F32()[i]) != math.Float32bits(wk.F32()[i]) {
			t.Fatalf("k[%d] = %v, want %v", i, k.F32()[i], wk.F32()[i])
		}
	}
	if slices.Equal(k.F32(), kv) {
		t.Fatal("k was not rotated")
	}
	bad := tensor(kv, T*KV*d)
	if err := RoPEQK(b, q, bad, pos, inv); err == nil || !strings.Contains(err.Error(), "want [T,H,d]") {
		t.Errorf("RoPEQK with a 1-D k: %v; want RoPE's error naming the shape", err)
	}
}

// TestQKVRoPERowsCheck: QKVRoPERows.Check returns the rows, heads and head
// width of well-formed operands (a contiguous cache and the paged pool),
// and names what is wrong in malformed ones; ProjectRoPEStoreRowsRef on
// the CPU puts q, k and v where its separate ops put them (rows of the
// contiguous cache at Pos.., of the pool at Slots).
func TestQKVRoPERowsCheck(t *testing.T) {
	dev := runtime.NewCPU(0)
	defer dev.Close()
	b, err := NewCPUBackend(dev)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 3))
	tensor := func(shape ...int) *runtime.Tensor {
		tt, err := runtime.NewTensor(dev, runtime.F32, shape, "test")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(tt.Buffer().Free)
		copy(tt.F32(), randF32(r, tt.NumElements()))
		return tt
	}
	const T, H, KV, d, D, C = 5, 4, 2, 8, 16, 12
	inv, err := RopeInvFreq(d, 10000, RopeScaling{})
	if err != nil {
		t.Fatal(err)
	}
	good := func() QKVRoPERows {
		return QKVRoPERows{Q: tensor(T, H, d), K: tensor(T, KV, d), V: tensor(T, KV, d), X: tensor(T, D),
			WQ: tensor(H*d, D), WK: tensor(KV*d, D), WV: tensor(KV*d, D), KCache: tensor(C, KV, d), VCache: tensor(C, KV, d),
			Pos: 7, InvFreq: inv}
	}
	if gT, gH, gKV, gd, err := good().Check(); err != nil || gT != T || gH != H || gKV != KV || gd != d {
		t.Fatalf("contiguous: %d, %d, %d, %d, %v; want %d, %d, %d, %d", gT, gH, gKV, gd, err, T, H, KV, d)
	}
	paged := good()
	paged.Positions, paged.Slots = []int32{0, 1, 2, 0, 1}, []int32{11, 3, 4, 0, 9}
	if _, _, _, _, err := paged.Check(); err != nil {
		t.Fatalf("paged: %v", err)
	}
	for _, c := range []struct {
		name, want string
		f          func(*QKVRoPERows)
	}{
		{"no q", "no q", func(a *QKVRoPERows) { a.Q = nil }},
		{"no frequencies", "frequencies", func(a *QKVRoPERows) { a.InvFreq = nil }},
		{"k weight rows", "weights", func(a *QKVRoPERows) { a.WK = tensor(KV*d+1, D) }},
		{"v weight columns", "weights", func(a *QKVRoPERows) { a.WV = tensor(KV*d, D+1) }},
		{"q rows", "q [", func(a *QKVRoPERows) { a.Q = tensor(T+1, H, d) }},
		{"cache heads", "caches", func(a *QKVRoPERows) { a.KCache = tensor(C, KV+1, d) }},
		{"caches differ", "caches", func(a *QKVRoPERows) { a.VCache = tensor(C+1, KV, d) }},
		{"slots without positions", "positions", func(a *QKVRoPERows) { a.Slots = []int32{0, 1, 2, 3, 4} }},
		{"positions short", "positions", func(a *QKVRoPERows) { a.Positions, a.Slots = []int32{0}, []int32{0} }},
		{"slot past the pool", "cache row 12", func(a *QKVRoPERows) { a.Positions, a.Slots = []int32{0, 1, 2, 3, 4}, []int32{0, 1, 2, 3, 12} }},
		{"negative position", "position -1", func(a *QKVRoPERows) { a.Positions, a.Slots = []int32{0, 1, 2, 3, -1}, []int32{0, 1, 2, 3, 4} }},
		{"past the cache", "past the cache", func(a *QKVRoPERows) { a.Pos = 8 }},
		{"negative start", "position -1", func(a *QKVRoPERows) { a.Pos = -1 }},
	} {
		a := good()
		c.f(&a)
		if _, _, _, _, err := a.Check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", c.name, err, c.want)
		}
		if err := ProjectRoPEStoreRowsRef(b, a); err == nil {
			t.Errorf("%s: the reference ran", c.name)
		}
	}

	// The reference: q, k, v as the separate ops leave them, cache rows stored.
	for _, a := range []QKVRoPERows{good(), paged} {
		kc0 := slices.Clone(a.KCache.F32())
		if err := ProjectRoPEStoreRowsRef(b, a); err != nil {
			t.Fatal(err)
		}
		q, k, v := tensor(T, H, d), tensor(T, KV, d), tensor(T, KV, d)
		for _, p := range []struct{ out, w *runtime.Tensor }{{q, a.WQ}, {k, a.WK}, {v, a.WV}} {
			if err := b.MatMul(p.out, a.X, p.w); err != nil {
				t.Fatal(err)
			}
		}
		for row := range T {
			pos := a.Pos + row
			if a.Positions != nil {
				pos = int(a.Positions[row])
			}
			if err := RoPEQK(b, sliceRow(t, q, row), sliceRow(t, k, row), pos, inv); err != nil {
				t.Fatal(err)
			}
		}
		for name, p := range map[string][2]*runtime.Tensor{"q": {a.Q, q}, "k": {a.K, k}, "v": {a.V, v}} {
			if !slices.Equal(p[0].F32(), p[1].F32()) {
				t.Errorf("pos %d positions %v: %s differs from the separate ops", a.Pos, a.Positions, name)
			}
		}
		row := KV * d
		for i := range C {
			slot, stored := i-a.Pos, i >= a.Pos && i < a.Pos+T
			if a.Positions != nil {
				slot = slices.Index(a.Slots, int32(i))
				stored = slot >= 0
			}
			got := a.KCache.F32()[i*row : (i+1)*row]
			want := kc0[i*row : (i+1)*row]
			if stored {
				want = k.F32()[slot*row : (slot+1)*row]
			}
			if !slices.Equal(got, want) {
				t.Errorf("pos %d positions %v: k cache row %d (stored %v) differs", a.Pos, a.Positions, i, stored)
			}
		}
	}
}

// sliceRow is row r of x [T,…] as a [1,…] view.
func sliceRow(t *testing.T, x *runtime.Tensor, r int) *runtime.Tensor {
	t.Helper()
	v, err := x.Slice(r, r+1)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
