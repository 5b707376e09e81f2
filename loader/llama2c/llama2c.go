// Package llama2c converts a checkpoint in the llama2.c format (the
// "version 0" .bin files of Karpathy's llama2.c: stories260K, stories15M,
// stories42M, stories110M) into a Hugging Face Llama checkpoint directory
// (config.json, model.safetensors, generation_config.json) that the loader
// and models.Load read.
//
// The .bin file is a header of seven little-endian int32 (dim, hidden_dim,
// n_layers, n_heads, n_kv_heads, vocab_size, seq_len; a negative vocab_size
// means the classifier is stored apart from the token embedding) followed by
// float32 tensors, each [out, in] row-major as a PyTorch Linear weight:
// token embedding [vocab, dim], attention RMSNorm weights [layers, dim], wq
// [layers, dim, dim], wk and wv [layers, kv_dim, dim], wo [layers, dim, dim],
// FFN RMSNorm weights [layers, dim], w1 (gate) [layers, hidden, dim], w2
// (down) [layers, dim, hidden], w3 (up) [layers, hidden, dim], the final
// RMSNorm weight [dim], the RoPE tables (seq_len × head_size/2 real, then as
// many imaginary; skipped), then the classifier [vocab, dim] when unshared.
//
// llama2.c rotates interleaved pairs (2j, 2j+1) of each head by the angle of
// frequency j; Hugging Face Llama rotates the halves (j, j+head_size/2). The
// conversion therefore permutes the rows of each q and k head: row
// a·head_size/2 + j of the converted head is row 2j + a of the original.
package llama2c

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/loader/internal/hfllama"
	"github.com/flextensor-go/flextensor/runtime"
)

// Header is the shape a llama2.c checkpoint declares.
type Header struct {
	Dim, HiddenDim, Layers, Heads, KVHeads, Vocab, SeqLen int
	// Shared is true when the classifier is the token embedding (a
	// positive vocab_size in the file).
	Shared bool
}

// HeadSize is Dim / Heads.
func (h Header) HeadSize() int { return h.Dim / h.Heads }

// Floats is the number of float32 values the file holds after its header.
// It fails, naming the term, when the count does not fit in an int64 (a
// crafted header can ask for more than any file holds).
func (h Header) Floats() (int64, error) {
	d, f, l, v := int64(h.Dim), int64(h.HiddenDim), int64(h.Layers), int64(h.Vocab)
	kv := int64(h.KVHeads) * int64(h.HeadSize())
	terms := []struct {
		name    string
		factors []int64
	}{
		{"vocab_size × dim (token embedding)", []int64{v, d}},
		{"n_layers × dim (RMSNorm weights)", []int64{2, l, d}},
		{"n_layers × dim × dim (wq, wo)", []int64{2, l, d, d}},
		{"n_layers × kv_dim × dim (wk, wv)", []int64{2, l, kv, d}},
		{"n_layers × hidden_dim × dim (w1, w2, w3)", []int64{3, l, f, d}},
		{"dim (final RMSNorm)", []int64{d}},
		{"seq_len × head_size (RoPE tables)", []int64{int64(h.SeqLen), int64(h.HeadSize())}},
	}
	if !h.Shared {
		terms = append(terms, terms[0])
		terms[len(terms)-1].name = "vocab_size × dim (classifier)"
	}
	var n int64
	for _, t := range terms {
		p := int64(1)
		for _, x := range t.factors {
			if x != 0 && p > math.MaxInt64/x {
				return 0, fmt.Errorf("llama2c: header %+v: %s overflows", h, t.name)
			}
			p *= x
		}
		if n > math.MaxInt64-p {
			return 0, fmt.Errorf("llama2c: header %+v: the float count overflows at %s", h, t.name)
		}
		n += p
	}
	return n, nil
}

// ParseHeader decodes the 28-byte header and checks that the shape is one a
// Llama model can have.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < 28 {
		return Header{}, fmt.Errorf("llama2c: header is %d bytes, want 28", len(b))
	}
	var v [7]int32
	for i := range v {
		v[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	h := Header{Dim: int(v[0]), HiddenDim: int(v[1]), Layers: int(v[2]), Heads: int(v[3]), KVHeads: int(v[4]), Vocab: int(v[5]), SeqLen: int(v[6]), Shared: v[5] > 0}
	if h.Vocab < 0 {
		h.Vocab = -h.Vocab
	}
	names := []string{"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"}
	for i, x := range []int{h.Dim, h.HiddenDim, h.Layers, h.Heads, h.KVHeads, h.Vocab, h.SeqLen} {
		if x <= 0 || x > 1<<20 {
			return Header{}, fmt.Errorf("llama2c: header field %s = %d is out of range (is this a llama2.c version 0 .bin?)", names[i], v[i])
		}
	}
	switch {
	case h.Dim%h.Heads != 0:
		return Header{}, fmt.Errorf("llama2c: dim %d is not a multiple of n_heads %d", h.Dim, h.Heads)
	case h.HeadSize()%2 != 0:
		return Header{}, fmt.Errorf("llama2c: head size %d is odd", h.HeadSize())
	case h.KVHeads > h.Heads || h.Heads%h.KVHeads != 0:
		return Header{}, fmt.Errorf("llama2c: n_heads %d is not a multiple of n_kv_heads %d", h.Heads, h.KVHeads)
	}
	return h, nil
}

// Options chooses how Convert writes the checkpoint.
type Options struct {
	// DType of the written weights: runtime.BF16 (the default when
	// Invalid) or runtime.F32.
	DType runtime.DType
	// BOS and EOS token ids for config.json; llama2.c's sentencepiece
	// tokenizers use 1 and 2, which are the defaults when both are zero.
	BOS, EOS int
}

// Convert reads the llama2.c checkpoint at binPath and writes a Hugging Face
// Llama checkpoint into outDir (created if missing): config.json,
// generation_config.json and model.safetensors. It returns the header read.
// No tokenizer is written: llama2.c keeps its own (tokenizer.bin) apart.
func Convert(binPath, outDir string, opt Options) (Header, error) {
	dt := opt.DType
	if dt == runtime.Invalid {
		dt = runtime.BF16
	}
	if dt != runtime.BF16 && dt != runtime.F32 {
		return Header{}, fmt.Errorf("llama2c: dtype %s: want BF16 or F32", dt)
	}
	if opt.BOS == 0 && opt.EOS == 0 {
		opt.BOS, opt.EOS = 1, 2
	}
	f, err := os.Open(binPath)
	if err != nil {
		return Header{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Header{}, err
	}
	hb := make([]byte, 28)
	if _, err := io.ReadFull(f, hb); err != nil {
		return Header{}, fmt.Errorf("llama2c %s: reading the header: %w", binPath, err)
	}
	h, err := ParseHeader(hb)
	if err != nil {
		return Header{}, fmt.Errorf("%s: %w", binPath, err)
	}
	n, err := h.Floats()
	if err != nil {
		return Header{}, fmt.Errorf("%s: %w", binPath, err)
	}
	// Compare counts of floats, not bytes: 4·n may overflow.
	if size := st.Size(); size < 28 || (size-28)%4 != 0 || (size-28)/4 != n {
		return Header{}, fmt.Errorf("llama2c %s: file is %d bytes, the header %+v needs 28 + 4·%d", binPath, size, h, n)
	}
	raw := make([]byte, st.Size()-28)
	if _, err := io.ReadFull(f, raw); err != nil {
		return Header{}, fmt.Errorf("llama2c %s: %w", binPath, err)
	}
	vals := make([]float32, len(raw)/4)
	for i := range vals {
		vals[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	ts := tensors(h, vals)
	out := make([]loader.NamedTensor, len(ts))
	for i, t := range ts {
		out[i] = loader.NamedTensor{Name: t.name, DType: dt, Shape: t.shape, Data: hfllama.Encode(t.data, dt)}
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return Header{}, err
	}
	cfg := hfllama.Config{Hidden: h.Dim, Intermediate: h.HiddenDim, Layers: h.Layers, Heads: h.Heads, KVHeads: h.KVHeads,
		HeadDim: h.HeadSize(), Vocab: h.Vocab, MaxPositions: h.SeqLen, RMSEps: 1e-5, RopeTheta: 10000, Tied: h.Shared,
		BOS: int64(opt.BOS), EOS: int64(opt.EOS), DType: dt}
	if err := hfllama.WriteConfigs(outDir, cfg); err != nil {
		return Header{}, err
	}
	meta := map[string]string{"format": "pt", "converted_from": "llama2.c"}
	if err := loader.WriteFile(filepath.Join(outDir, "model.safetensors"), out, meta); err != nil {
		return Header{}, err
	}
	return h, nil
}

type tensor struct {
	name  string
	shape []int
	data  []float32
}

// tensors slices vals (the file after its header; its length checked by
// the caller) into Hugging Face Llama tensors, q and k rows permuted.
func tensors(h Header, vals []float32) []tensor {
	d, f, L, V := h.Dim, h.HiddenDim, h.Layers, h.Vocab
	kv := h.KVHeads * h.HeadSize()
	off := 0
	take := func(n int) []float32 { s := vals[off : off+n]; off += n; return s }
	emb := take(V * d)
	attnNorm, wq, wk, wv, wo := take(L*d), take(L*d*d), take(L*kv*d), take(L*kv*d), take(L*d*d)
	ffnNorm, w1, w2, w3 := take(L*d), take(L*f*d), take(L*d*f), take(L*f*d)
	final := take(d)
	take(h.SeqLen * h.HeadSize()) // freq_cis_real, freq_cis_imag
	ts := []tensor{{"model.embed_tokens.weight", []int{V, d}, emb}}
	for l := range L {
		p := fmt.Sprintf("model.layers.%d.", l)
		ts = append(ts,
			tensor{p + "input_layernorm.weight", []int{d}, attnNorm[l*d : (l+1)*d]},
			tensor{p + "self_attn.q_proj.weight", []int{d, d}, hfllama.PermuteRoPE(wq[l*d*d:(l+1)*d*d], h.Heads, h.HeadSize(), d)},
			tensor{p + "self_attn.k_proj.weight", []int{kv, d}, hfllama.PermuteRoPE(wk[l*kv*d:(l+1)*kv*d], h.KVHeads, h.HeadSize(), d)},
			tensor{p + "self_attn.v_proj.weight", []int{kv, d}, wv[l*kv*d : (l+1)*kv*d]},
			tensor{p + "self_attn.o_proj.weight", []int{d, d}, wo[l*d*d : (l+1)*d*d]},
			tensor{p + "post_attention_layernorm.weight", []int{d}, ffnNorm[l*d : (l+1)*d]},
			tensor{p + "mlp.gate_proj.weight", []int{f, d}, w1[l*f*d : (l+1)*f*d]},
			tensor{p + "mlp.down_proj.weight", []int{d, f}, w2[l*d*f : (l+1)*d*f]},
			tensor{p + "mlp.up_proj.weight", []int{f, d}, w3[l*f*d : (l+1)*f*d]},
		)
	}
	ts = append(ts, tensor{"model.norm.weight", []int{d}, final})
	if !h.Shared {
		ts = append(ts, tensor{"lm_head.weight", []int{V, d}, take(V * d)})
	}
	return ts
}
