package gguf

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// builder writes a GGUF file: metadata entries, then tensors whose data
// follows at 32-byte alignment.
type builder struct {
	kv      []byte
	nkv     int
	infos   []byte
	data    []byte
	nt      int
	version uint32
}

func str(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}

func (g *builder) u32(k string, v uint32) {
	g.kv = binary.LittleEndian.AppendUint32(str(g.kv, k), typeU32)
	g.kv = binary.LittleEndian.AppendUint32(g.kv, v)
	g.nkv++
}

func (g *builder) u64(k string, v uint64) {
	g.kv = binary.LittleEndian.AppendUint32(str(g.kv, k), typeU64)
	g.kv = binary.LittleEndian.AppendUint64(g.kv, v)
	g.nkv++
}

func (g *builder) f32(k string, v float32) {
	g.kv = binary.LittleEndian.AppendUint32(str(g.kv, k), typeF32)
	g.kv = binary.LittleEndian.AppendUint32(g.kv, math.Float32bits(v))
	g.nkv++
}

func (g *builder) str(k, v string) {
	g.kv = str(binary.LittleEndian.AppendUint32(str(g.kv, k), typeString), v)
	g.nkv++
}

// tensor adds a tensor of ggml type typ with dims (innermost first) and raw
// data.
func (g *builder) tensor(name string, typ uint32, dims []uint64, data []byte) {
	g.infos = binary.LittleEndian.AppendUint32(str(g.infos, name), uint32(len(dims)))
	for _, d := range dims {
		g.infos = binary.LittleEndian.AppendUint64(g.infos, d)
	}
	g.infos = binary.LittleEndian.AppendUint32(g.infos, typ)
	g.infos = binary.LittleEndian.AppendUint64(g.infos, uint64(len(g.data)))
	g.data = append(g.data, data...)
	for len(g.data)%32 != 0 {
		g.data = append(g.data, 0)
	}
	g.nt++
}

func (g *builder) bytes() []byte {
	v := g.version
	if v == 0 {
		v = 3
	}
	b := append([]byte("GGUF"), 0, 0, 0, 0)
	binary.LittleEndian.PutUint32(b[4:], v)
	b = binary.LittleEndian.AppendUint64(b, uint64(g.nt))
	b = binary.LittleEndian.AppendUint64(b, uint64(g.nkv))
	b = append(append(b, g.kv...), g.infos...)
	for len(b)%32 != 0 {
		b = append(b, 0)
	}
	return append(b, g.data...)
}

func f32s(v ...float32) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

func TestParseAndRead(t *testing.T) {
	var g builder
	g.str("general.architecture", "llama")
	g.u32("llama.block_count", 2)
	g.f32("llama.rope.freq_base", 500000)
	g.tensor("a", ggmlF32, []uint64{3, 2}, f32s(1, 2, 3, 4, 5, 6))
	g.tensor("h", ggmlF16, []uint64{4}, []byte{0x00, 0x3c, 0x00, 0xc0, 0xff, 0x7b, 0x01, 0x00})
	g.tensor("b", ggmlBF16, []uint64{2}, []byte{0x80, 0x3f, 0x40, 0xc0})
	g.tensor("q", 2, []uint64{32}, make([]byte, 18)) // Q4_0: one block
	f, err := Parse(g.bytes())
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := f.String("general.architecture"); a != "llama" {
		t.Errorf("architecture %q", a)
	}
	if n, _ := f.Int("llama.block_count"); n != 2 {
		t.Errorf("block_count %d", n)
	}
	if v, ok := asFloat(f.Metadata["llama.rope.freq_base"]); !ok || v != 500000 {
		t.Errorf("freq_base %v", v)
	}
	for _, c := range []struct {
		name string
		want []float32
	}{{"a", []float32{1, 2, 3, 4, 5, 6}}, {"h", []float32{1, -2, 65504, 0x1p-24}}, {"b", []float32{1, -3}}} {
		got, _, err := f.Float32(c.name)
		if err != nil {
			t.Fatal(err)
		}
		for i := range c.want {
			if got[i] != c.want[i] {
				t.Errorf("%s[%d] = %g, want %g", c.name, i, got[i], c.want[i])
			}
		}
	}
	if _, _, err := f.Float32("q"); err == nil || !strings.Contains(err.Error(), `"q" has ggml type 2`) {
		t.Errorf("quantized tensor: %v", err)
	}
	if _, _, err := f.Float32("nope"); err == nil {
		t.Error("missing tensor: no error")
	}
	if _, err := f.Int("general.architecture"); err == nil {
		t.Error("Int of a string: no error")
	}
}

func TestHalfToFloat(t *testing.T) {
	for h, want := range map[uint16]float32{0x3c00: 1, 0xc000: -2, 0x3555: 0.333251953125, 0x0400: 0x1p-14, 0x03ff: 0x3ffp-24, 0x8001: -0x1p-24, 0x8000: float32(math.Copysign(0, -1))} {
		if got := halfToFloat(h); got != want || math.Signbit(float64(got)) != math.Signbit(float64(want)) {
			t.Errorf("halfToFloat(%#04x) = %g, want %g", h, got, want)
		}
	}
	if !math.IsInf(float64(halfToFloat(0xfc00)), -1) || !math.IsNaN(float64(halfToFloat(0x7e00))) {
		t.Error("infinity or NaN lost")
	}
}

// TestMalformed: bad files give ErrFormat errors naming what is wrong, and
// no prefix of a real file panics.
func TestMalformed(t *testing.T) {
	var g builder
	g.str("general.architecture", "llama")
	g.tensor("a", ggmlF32, []uint64{2}, f32s(1, 2))
	good := g.bytes()
	v1 := builder{version: 1}
	for _, c := range []struct {
		name, want string
		data       []byte
	}{
		{"magic", "no GGUF magic", []byte("GGML....")},
		{"version", "version 1", v1.bytes()},
		{"truncated", "needs", good[:40]},
		{"data past end", "runs past the end", good[:len(good)-28]},
	} {
		_, err := Parse(c.data)
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrFormat naming %q", c.name, err, c.want)
		}
	}
	var huge builder
	huge.tensor("big", ggmlF32, []uint64{1 << 40, 1 << 40}, nil)
	if _, err := Parse(huge.bytes()); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), `"big"`) {
		t.Errorf("2^80 elements: %v", err)
	}
	var bad builder
	bad.u32("general.alignment", 24)
	if _, err := Parse(bad.bytes()); err == nil || !strings.Contains(err.Error(), "alignment") {
		t.Errorf("alignment 24: %v", err)
	}
	real, err := os.ReadFile("../../testdata/stories260K/stories260K.gguf")
	if err != nil {
		t.Skip(err)
	}
	for n := 0; n < len(real); n += 1 + n/3 {
		if _, err := Parse(real[:n]); err == nil {
			t.Errorf("a %d-byte prefix parsed", n)
		}
	}
}

// TestConvertErrors: what is not a convertible Llama is refused by name.
func TestConvertErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(g *builder) string {
		p := filepath.Join(dir, "m.gguf")
		if err := os.WriteFile(p, g.bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	shape := func(g *builder) {
		g.str("general.architecture", "llama")
		for k, v := range map[string]uint32{"llama.embedding_length": 4, "llama.feed_forward_length": 8, "llama.block_count": 1,
			"llama.attention.head_count": 2, "llama.attention.head_count_kv": 1, "llama.context_length": 16} {
			g.u32(k, v)
		}
	}
	var arch builder
	arch.str("general.architecture", "gpt2")
	if _, err := ConvertLlama(write(&arch), dir, Options{}); err == nil || !strings.Contains(err.Error(), `"gpt2"`) {
		t.Errorf("gpt2: %v", err)
	}
	var noEmb builder
	shape(&noEmb)
	if _, err := ConvertLlama(write(&noEmb), dir, Options{}); err == nil || !strings.Contains(err.Error(), "token_embd.weight") {
		t.Errorf("no embedding: %v", err)
	}
	var partial builder
	shape(&partial)
	partial.tensor("token_embd.weight", ggmlF32, []uint64{4, 3}, make([]byte, 48))
	if _, err := ConvertLlama(write(&partial), dir, Options{}); err == nil || !strings.Contains(err.Error(), "blk.0.attn_norm.weight") {
		t.Errorf("missing layer tensor: %v", err)
	}
	var wrong builder
	shape(&wrong)
	wrong.tensor("token_embd.weight", ggmlF32, []uint64{4, 3}, make([]byte, 48))
	wrong.tensor("blk.0.attn_norm.weight", ggmlF32, []uint64{5}, make([]byte, 20))
	if _, err := ConvertLlama(write(&wrong), dir, Options{}); err == nil || !strings.Contains(err.Error(), `"blk.0.attn_norm.weight" has dims [5]`) {
		t.Errorf("wrong dims: %v", err)
	}
	var heads builder
	shape(&heads)
	heads.u32("llama.attention.head_count_kv", 3)
	if _, err := ConvertLlama(write(&heads), dir, Options{}); err == nil || !strings.Contains(err.Error(), "key/value heads") {
		t.Errorf("3 kv heads of 2: %v", err)
	}
	// key_length 2^60+2 wrapped heads·key_length·hidden to 32, so a
	// [16, 2] attn_q passed the size check and the RoPE permutation
	// indexed out of range.
	var keyLen builder
	keyLen.str("general.architecture", "llama")
	for k, v := range map[string]uint32{"llama.embedding_length": 16, "llama.feed_forward_length": 8, "llama.block_count": 1,
		"llama.attention.head_count": 1, "llama.context_length": 16} {
		keyLen.u32(k, v)
	}
	keyLen.u64("llama.attention.key_length", 1<<60+2)
	keyLen.tensor("token_embd.weight", ggmlF32, []uint64{16, 3}, make([]byte, 4*48))
	keyLen.tensor("blk.0.attn_norm.weight", ggmlF32, []uint64{16}, make([]byte, 4*16))
	keyLen.tensor("blk.0.attn_q.weight", ggmlF32, []uint64{16, 2}, make([]byte, 4*32))
	if _, err := ConvertLlama(write(&keyLen), dir, Options{}); err == nil || !strings.Contains(err.Error(), "llama.attention.key_length") {
		t.Errorf("key_length 2^60+2: %v", err)
	}
	var kvRange builder
	shape(&kvRange)
	kvRange.u64("llama.attention.head_count_kv", 1<<40)
	if _, err := ConvertLlama(write(&kvRange), dir, Options{}); err == nil || !strings.Contains(err.Error(), "llama.attention.head_count_kv") {
		t.Errorf("head_count_kv 2^40: %v", err)
	}
	// Heads × key_length past the limit, each within it.
	var qWide builder
	shape(&qWide)
	qWide.u32("llama.attention.key_length", 1<<24)
	if _, err := ConvertLlama(write(&qWide), dir, Options{}); err == nil || !strings.Contains(err.Error(), "key_length") {
		t.Errorf("2 heads × key_length 2^24: %v", err)
	}
	// Llama 3.1's RoPE scaling lives in rope_freqs.weight; refused, not dropped.
	var freqs builder
	shape(&freqs)
	freqs.tensor("token_embd.weight", ggmlF32, []uint64{4, 3}, make([]byte, 48))
	freqs.tensor("rope_freqs.weight", ggmlF32, []uint64{1}, make([]byte, 4))
	if _, err := ConvertLlama(write(&freqs), dir, Options{}); err == nil || !strings.Contains(err.Error(), "rope_freqs.weight") {
		t.Errorf("rope_freqs.weight: %v", err)
	}
	for _, c := range []struct {
		key string
		v   float32
	}{{"llama.rope.freq_base", -1}, {"llama.rope.freq_base", float32(math.Inf(1))},
		{"llama.attention.layer_norm_rms_epsilon", float32(math.NaN())}, {"llama.attention.layer_norm_rms_epsilon", 0}} {
		var g builder
		shape(&g)
		g.f32(c.key, c.v)
		g.tensor("token_embd.weight", ggmlF32, []uint64{4, 3}, make([]byte, 48))
		if _, err := ConvertLlama(write(&g), dir, Options{}); err == nil || !strings.Contains(err.Error(), c.key) {
			t.Errorf("%s = %v: %v", c.key, c.v, err)
		}
	}
}

// TestArrayLimits: a metadata array claiming more than maxArray elements is a
// format error naming its key (its length was bounded only by the bytes
// left, tensor data included, and preallocated), and a long array within the
// limit still parses.
func TestArrayLimits(t *testing.T) {
	arr := func(n uint64, pad int) []byte {
		var g builder
		g.kv = binary.LittleEndian.AppendUint32(str(g.kv, "tokenizer.ggml.scores"), typeArray)
		g.kv = binary.LittleEndian.AppendUint32(g.kv, typeU8)
		g.kv = binary.LittleEndian.AppendUint64(g.kv, n)
		g.kv = append(g.kv, make([]byte, pad)...)
		g.nkv++
		return g.bytes()
	}
	_, err := Parse(arr(1<<24+1, 1<<24+64))
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "tokenizer.ggml.scores") || !strings.Contains(err.Error(), "at most") {
		t.Errorf("array of maxArray+1 elements: error %v, want a format error naming the key and the limit", err)
	}
	f, err := Parse(arr(100000, 100000))
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := f.Metadata["tokenizer.ggml.scores"].([]any); len(a) != 100000 {
		t.Errorf("array of 100000 elements read as %d", len(a))
	}
}
