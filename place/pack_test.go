package place_test

import (
	"bytes"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/place"
	"github.com/flextensor-go/flextensor/runtime"
)

// attnNet is one attention-like block: sibling projections q, k, v (a bias
// on k when biased), o, and an odd-sized one after them.
type attnNet struct {
	nn.Base
	Q, K, V, O, Odd *nn.Linear
}

func newAttnNet(biased bool) *attnNet {
	m := &attnNet{}
	nn.Init(m, "")
	blk := nn.NewContainer(m, "attn")
	m.Q = nn.NewLinear(blk, "q", 16, 16) // 16×16 f32: 1024 bytes
	if biased {
		m.K = nn.NewLinearBias(blk, "k", 16, 8)
	} else {
		m.K = nn.NewLinear(blk, "k", 16, 8) // 512 bytes
	}
	m.V = nn.NewLinear(blk, "v", 16, 8)
	m.O = nn.NewLinear(blk, "o", 16, 16)
	m.Odd = nn.NewLinear(blk, "odd", 16, 3) // 192 bytes: ends the run
	return m
}

func attnTensors(biased bool) []loader.NamedTensor {
	var out []loader.NamedTensor
	add := func(name string, shape ...int) {
		n := 4
		for _, d := range shape {
			n *= d
		}
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(len(out)*29 + i*5 + 3)
		}
		out = append(out, loader.NamedTensor{Name: name, DType: runtime.F32, Shape: shape, Data: data})
	}
	add("attn.q.weight", 16, 16)
	add("attn.k.weight", 8, 16)
	if biased {
		add("attn.k.bias", 8)
	}
	add("attn.v.weight", 8, 16)
	add("attn.o.weight", 16, 16)
	add("attn.odd.weight", 3, 16)
	return out
}

// TestBindPacksSiblings: on a device without host memory, Bind puts sibling
// parameters back to back in one buffer while their bytes stay a multiple
// of 256 (q, k, v and o adjacent: kernels.Adjacent holds; a k bias of 32
// bytes ends the run, so v starts a new buffer); every tensor holds its
// checkpoint bytes and the device holds exactly the tensors' bytes.
func TestBindPacksSiblings(t *testing.T) {
	for _, biased := range []bool{false, true} {
		ts := attnTensors(biased)
		ck := writeCheckpoint(t, ts)
		cpu := runtime.NewCPU(0)
		m := newAttnNet(biased)
		w, err := place.Bind(m, ck, stagedDevice{cpu})
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, nt := range ts {
			n += int64(len(nt.Data))
		}
		if cpu.Memory().InUse != n {
			t.Errorf("biased %v: device bytes %d, want the tensors' %d", biased, cpu.Memory().InUse, n)
		}
		params := map[string]*nn.Parameter{}
		for _, p := range nn.Parameters(m) {
			params[p.Name()] = p
		}
		for _, nt := range ts {
			p := params[nt.Name]
			if p == nil {
				t.Fatalf("no parameter %s", nt.Name)
			}
			if !bytes.Equal(p.Peek().Bytes(), nt.Data) {
				t.Errorf("biased %v: %s does not hold its checkpoint bytes", biased, nt.Name)
			}
			if p.Peek().Offset()%256 != 0 {
				t.Errorf("biased %v: %s at offset %d, want a multiple of 256", biased, nt.Name, p.Peek().Offset())
			}
		}
		wt := func(l *nn.Linear) *runtime.Tensor { return l.Weight.Tensor() }
		qkv := []*runtime.Tensor{wt(m.Q), wt(m.K), wt(m.V)}
		if got := kernels.Adjacent(qkv); got == biased {
			t.Errorf("biased %v: q, k, v adjacent %v", biased, got)
		}
		if got := kernels.Adjacent([]*runtime.Tensor{wt(m.V), wt(m.O)}); !got {
			t.Errorf("biased %v: v and o not adjacent", biased)
		}
		want := 1
		if biased {
			want = 2
		}
		if got := len(w.Buffers()); got != want {
			t.Errorf("biased %v: %d buffers, want %d", biased, got, want)
		}
		w.Close()
		if cpu.Memory().InUse != 0 {
			t.Errorf("biased %v: Close left %d bytes", biased, cpu.Memory().InUse)
		}
		cpu.Close()
	}
}
