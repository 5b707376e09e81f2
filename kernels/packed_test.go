package kernels

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// TestVarlenContigPackedKV: PackedKV lays fresh packed sequences out as a
// pool of one-position blocks whose table names their own rows (checked by
// PagedKV.Check over exactly T rows), and VarlenPrefillAttention over k, v
// as pools with it gives each sequence's AttentionWindow over its own rows
// bit for bit, for every window, with 1-token and empty sequences.
func TestVarlenContigPackedKV(t *testing.T) {
	qStarts := []int32{0, 5, 6, 6, 13, 15}
	kv := PackedKV(qStarts)
	if kv.BlockSize != 1 || kv.MaxBlocks != 7 || !slices.Equal(kv.SeqLens, []int32{5, 1, 0, 7, 2}) {
		t.Fatalf("layout %+v: want block size 1, 7 blocks per sequence, lengths 5 1 0 7 2", kv)
	}
	if got := kv.BlockTable[3*7 : 3*7+7]; !slices.Equal(got, []int32{6, 7, 8, 9, 10, 11, 12}) {
		t.Errorf("sequence 3's table %v, want rows 6..12", got)
	}
	if _, err := kv.Check(qStarts, 15); err != nil {
		t.Errorf("Check over the 15 packed rows: %v", err)
	}
	if _, err := kv.Check(qStarts, 14); err == nil {
		t.Errorf("Check over 14 rows passed; the last sequence reads row 14")
	}
	if e := PackedKV(nil); len(e.SeqLens) != 0 || e.MaxBlocks != 1 {
		t.Errorf("no sequences: %+v", e)
	}

	const H, K, d = 4, 2, 8
	r := rand.New(rand.NewPCG(3, 9))
	b, tensor := cpuF32(t)
	T := int(qStarts[len(qStarts)-1])
	q, k, v := randF32(r, T*H*d), randF32(r, T*K*d), randF32(r, T*K*d)
	qt, kt, vt, out := tensor(q, T, H, d), tensor(k, T, K, d), tensor(v, T, K, d), tensor(nil, T, H, d)
	for _, window := range []int{0, 2, 4} {
		if err := b.VarlenPrefillAttention(out, qt, kt, vt, qStarts, kv, window); err != nil {
			t.Fatal(err)
		}
		for s := 0; s+1 < len(qStarts); s++ {
			lo, hi := int(qStarts[s]), int(qStarts[s+1])
			n := hi - lo
			if n == 0 {
				continue
			}
			want := make([]float32, n*H*d)
			if err := AttentionWindow(want, q[lo*H*d:hi*H*d], k[lo*K*d:hi*K*d], v[lo*K*d:hi*K*d], n, 0, H, K, d, window, nil); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(out.F32()[lo*H*d:hi*H*d], want) {
				t.Errorf("window %d, sequence %d: differs from its attention alone", window, s)
			}
		}
	}
}

// TestVarlenContigCheckBadInput: CheckPackedPrefill names what is wrong.
func TestVarlenContigCheckBadInput(t *testing.T) {
	dev := runtime.NewCPU(0)
	defer dev.Close()
	mk := func(shape ...int) *runtime.Tensor {
		tt, err := runtime.NewTensor(dev, runtime.F32, shape, "test")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(tt.Buffer().Free)
		return tt
	}
	q, out, k, v := mk(6, 4, 8), mk(6, 4, 8), mk(6, 2, 8), mk(6, 2, 8)
	T, H, K, d, err := CheckPackedPrefill("op", out, q, k, v, []int32{0, 2, 6}, 0)
	if err != nil || T != 6 || H != 4 || K != 2 || d != 8 {
		t.Fatalf("good input: %d %d %d %d, %v", T, H, K, d, err)
	}
	for _, c := range []struct {
		name    string
		out, k  *runtime.Tensor
		qStarts []int32
		window  int
		want    string
	}{
		{"negative window", out, k, []int32{0, 6}, -1, "negative"},
		{"k rows", out, mk(5, 2, 8), []int32{0, 6}, 0, "want [T,H,d] and [T,K,d]"},
		{"k width", out, mk(6, 2, 4), []int32{0, 6}, 0, "want [T,H,d] and [T,K,d]"},
		{"out shape", mk(6, 4, 4), k, []int32{0, 6}, 0, "want [T,H,d] and [T,K,d]"},
		{"heads", out, mk(6, 3, 8), []int32{0, 6}, 0, "want a multiple"},
		{"no sequences", out, k, []int32{0}, 0, "at least one sequence"},
		{"short starts", out, k, []int32{0, 5}, 0, "from 0 to the 6 rows"},
		{"nonzero first", out, k, []int32{1, 6}, 0, "from 0 to the 6 rows"},
		{"decreasing", out, k, []int32{0, 4, 3, 6}, 0, "decrease at sequence 1"},
	} {
		vv := v
		if c.k != k {
			vv = c.k
		}
		_, _, _, _, err := CheckPackedPrefill("op", c.out, q, c.k, vv, c.qStarts, c.window)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "op: ") {
			t.Errorf("%s: error %v, want one from op containing %q", c.name, err, c.want)
		}
	}
	if _, _, _, _, err := CheckPackedPrefill("op", out, q, nil, v, []int32{0, 6}, 0); err == nil || !strings.Contains(err.Error(), "required") {
		t.Errorf("nil k: %v", err)
	}
	// No query heads (with KV heads) or no head width: refused by shape.
	for _, c := range []struct {
		name         string
		q, out, k, v *runtime.Tensor
	}{
		{"no query heads", mk(6, 0, 8), mk(6, 0, 8), k, v},
		{"head width 0", mk(6, 4, 0), mk(6, 4, 0), mk(6, 2, 0), mk(6, 2, 0)},
	} {
		_, _, _, _, err := CheckPackedPrefill("op", c.out, c.q, c.k, c.v, []int32{0, 6}, 0)
		if err == nil || !strings.Contains(err.Error(), "at least one query head and a head width above 0") || !strings.Contains(err.Error(), fmt.Sprint(c.q.Shape())) {
			t.Errorf("%s: error %v, want one naming q's shape %v", c.name, err, c.q.Shape())
		}
	}
}
