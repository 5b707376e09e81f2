package all_test

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/loader/llama2c"
	"github.com/flextensor-go/flextensor/runtime"
)

// writeLlama2c writes a llama2.c version-0 checkpoint of random weights
// (norm weights around 1) with the given header fields; a negative vocab
// stores an unshared classifier.
func writeLlama2c(t *testing.T, path string, dim, hidden, layers, heads, kvHeads, vocab, seqLen int) {
	t.Helper()
	hdr := []int32{int32(dim), int32(hidden), int32(layers), int32(heads), int32(kvHeads), int32(vocab), int32(seqLen)}
	b := make([]byte, 0, 28)
	for _, v := range hdr {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	h, err := llama2c.ParseHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, uint64(dim)))
	norm := func(n int) {
		for range n {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(0.8+0.4*r.Float64())))
		}
	}
	mat := func(n int, scale float64) {
		for range n {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(scale*r.NormFloat64())))
		}
	}
	V, kv, s := h.Vocab, h.KVHeads*h.HeadSize(), 1/math.Sqrt(float64(dim))
	mat(V*dim, 1)
	norm(layers * dim)
	mat(layers*dim*dim, s)
	mat(layers*kv*dim, s)
	mat(layers*kv*dim, s)
	mat(layers*dim*dim, s)
	norm(layers * dim)
	mat(layers*hidden*dim, s)
	mat(layers*dim*hidden, 1/math.Sqrt(float64(hidden)))
	mat(layers*hidden*dim, s)
	norm(dim)
	mat(seqLen*h.HeadSize(), 1) // the RoPE tables the converter skips
	if !h.Shared {
		mat(V*dim, s)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// llama2cForward runs llama2.c's forward pass (as its run.c computes it, in
// float64) over ids on the checkpoint at path, returning every position's
// logits.
func llama2cForward(t *testing.T, path string, ids []int32) []float32 {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h, err := llama2c.ParseHeader(raw)
	if err != nil {
		t.Fatal(err)
	}
	w := make([]float64, (len(raw)-28)/4)
	for i := range w {
		w[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[28+4*i:])))
	}
	d, f, L, V, hs := h.Dim, h.HiddenDim, h.Layers, h.Vocab, h.HeadSize()
	kvd := h.KVHeads * hs
	off := 0
	take := func(n int) []float64 { s := w[off : off+n]; off += n; return s }
	emb, attnNorm, wq, wk, wv, wo := take(V*d), take(L*d), take(L*d*d), take(L*kvd*d), take(L*kvd*d), take(L*d*d)
	ffnNorm, w1, w2, w3, final := take(L*d), take(L*f*d), take(L*d*f), take(L*f*d), take(d)
	take(h.SeqLen * hs)
	cls := emb
	if !h.Shared {
		cls = take(V * d)
	}
	matvec := func(m []float64, x []float64, rows int) []float64 {
		in := len(x)
		out := make([]float64, rows)
		for r := range rows {
			var s float64
			for c := range in {
				s += m[r*in+c] * x[c]
			}
			out[r] = s
		}
		return out
	}
	rms := func(x, g []float64) []float64 {
		var ss float64
		for _, v := range x {
			ss += v * v
		}
		inv := 1 / math.Sqrt(ss/float64(len(x))+1e-5)
		out := make([]float64, len(x))
		for i := range x {
			out[i] = g[i] * x[i] * inv
		}
		return out
	}
	rope := func(v []float64, pos int) {
		for i := 0; i < len(v); i += 2 {
			freq := 1 / math.Pow(10000, float64(i%hs)/float64(hs))
			c, s := math.Cos(float64(pos)*freq), math.Sin(float64(pos)*freq)
			v[i], v[i+1] = v[i]*c-v[i+1]*s, v[i]*s+v[i+1]*c
		}
	}
	kc := make([][][]float64, L) // [layer][pos][kvd]
	vc := make([][][]float64, L)
	logits := make([]float32, 0, len(ids)*V)
	for pos, id := range ids {
		x := slices.Clone(emb[int(id)*d : int(id+1)*d])
		for l := range L {
			xb := rms(x, attnNorm[l*d:(l+1)*d])
			q := matvec(wq[l*d*d:(l+1)*d*d], xb, d)
			k := matvec(wk[l*kvd*d:(l+1)*kvd*d], xb, kvd)
			v := matvec(wv[l*kvd*d:(l+1)*kvd*d], xb, kvd)
			rope(q, pos)
			rope(k, pos)
			kc[l], vc[l] = append(kc[l], k), append(vc[l], v)
			att := make([]float64, d)
			for hd := range h.Heads {
				kh := hd / (h.Heads / h.KVHeads)
				sc := make([]float64, pos+1)
				top := math.Inf(-1)
				for p := range pos + 1 {
					for i := range hs {
						sc[p] += q[hd*hs+i] * kc[l][p][kh*hs+i]
					}
					sc[p] /= math.Sqrt(float64(hs))
					top = max(top, sc[p])
				}
				var z float64
				for p := range sc {
					sc[p] = math.Exp(sc[p] - top)
					z += sc[p]
				}
				for p := range sc {
					for i := range hs {
						att[hd*hs+i] += sc[p] / z * vc[l][p][kh*hs+i]
					}
				}
			}
			for i, v := range matvec(wo[l*d*d:(l+1)*d*d], att, d) {
				x[i] += v
			}
			xb = rms(x, ffnNorm[l*d:(l+1)*d])
			g, u := matvec(w1[l*f*d:(l+1)*f*d], xb, f), matvec(w3[l*f*d:(l+1)*f*d], xb, f)
			for i := range g {
				g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
			}
			for i, v := range matvec(w2[l*d*f:(l+1)*d*f], g, d) {
				x[i] += v
			}
		}
		for _, v := range matvec(cls, rms(x, final), V) {
			logits = append(logits, float32(v))
		}
	}
	return logits
}

// TestLlama2cConversion: llama2.c checkpoints (random weights, grouped
// heads, shared and unshared classifiers) converted to the Hugging Face
// layout in F32 give, through models.Load and the CPU kernels, the logits of
// a direct float64 implementation of llama2.c's forward pass (interleaved
// RoPE pairs) on the raw file: the converter's tensor order and its q/k row
// permutation are right. Malformed files are refused with errors naming
// what is wrong.
func TestLlama2cConversion(t *testing.T) {
	for _, c := range []struct {
		name                                          string
		dim, hidden, layers, heads, kv, vocab, seqLen int
	}{{"shared", 32, 80, 2, 4, 2, 96, 64}, {"unshared", 48, 64, 3, 6, 6, -80, 64}} {
		t.Run(c.name, func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), "model.bin")
			writeLlama2c(t, bin, c.dim, c.hidden, c.layers, c.heads, c.kv, c.vocab, c.seqLen)
			dir := t.TempDir()
			h, err := llama2c.Convert(bin, dir, llama2c.Options{DType: runtime.F32})
			if err != nil {
				t.Fatal(err)
			}
			if h.Shared != (c.vocab > 0) {
				t.Errorf("Shared %v for vocab_size %d", h.Shared, c.vocab)
			}
			dev, b := cpu(t)
			m := load(t, dir, dev)
			if m.Cfg.TieWordEmbeddings != h.Shared {
				t.Errorf("tie_word_embeddings %v, want %v", m.Cfg.TieWordEmbeddings, h.Shared)
			}
			ids := []int32{1}
			for i := range 40 {
				ids = append(ids, int32((i*37+11)%h.Vocab))
			}
			got := fp8Logits(t, m, b, ids)
			want := llama2cForward(t, bin, ids)
			V := h.Vocab
			var worst, span float64
			for i := range ids {
				g, w := got[i*V:(i+1)*V], want[i*V:(i+1)*V]
				worst = max(worst, maxDiff(g, w))
				span = max(span, float64(slices.Max(w)-slices.Min(w)))
			}
			t.Logf("%+v: max |logit diff| %.3g against the llama2.c forward (logits span %.3g)", h, worst, span)
			if worst > 1e-4*max(span, 1) {
				t.Errorf("max |logit diff| %.3g against the llama2.c forward", worst)
			}
			// BF16 output converts too, at half the bytes.
			if _, err := llama2c.Convert(bin, t.TempDir(), llama2c.Options{}); err != nil {
				t.Error(err)
			}
		})
	}
	t.Run("bad input", func(t *testing.T) {
		dir := t.TempDir()
		good := filepath.Join(dir, "good.bin")
		writeLlama2c(t, good, 16, 32, 1, 2, 1, 32, 8)
		raw, err := os.ReadFile(good)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name, want string
			data       []byte
		}{
			{"short header", "reading the header", raw[:12]},
			{"truncated", "needs", raw[:len(raw)-4]},
			{"zero heads", "n_heads", slices.Concat(raw[:12], []byte{0, 0, 0, 0}, raw[16:])},
			{"kv heads", "n_kv_heads", slices.Concat(raw[:16], []byte{3, 0, 0, 0}, raw[20:])},
		} {
			p := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")+".bin")
			if err := os.WriteFile(p, c.data, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := llama2c.Convert(p, t.TempDir(), llama2c.Options{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: error %v, want one naming %q", c.name, err, c.want)
			}
		}
		if _, err := llama2c.Convert(good, t.TempDir(), llama2c.Options{DType: runtime.F16}); err == nil {
			t.Error("F16 output: no error")
		}
	})
}
