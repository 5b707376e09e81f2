//go:build cuda

package cudabackend

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/x448/float16"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// Every kernel against the CPU reference (package kernels) on fresh random
// inputs: inputs are rounded to bf16 so both sides see the same values, the
// GPU output is poisoned with NaN first, and every element is checked with
// |got − want| ≤ atol + rtol·|want|.

var (
	gdev *cuda.Device
	gb   *Backend
	cpu  *runtime.CPUDevice
	cb   *kernels.CPUBackend
	seed = uint64(time.Now().UnixNano())
)

// Without a GPU (cuda.Open(0) fails) every test skips, saying why; a GPU
// whose kernels do not build fails every test.
var (
	noGPU    error
	setupErr error
)

// needGPU skips t without a GPU and fails it if the backend did not start.
// Every test calls it first.
func needGPU(t *testing.T) {
	t.Helper()
	if noGPU != nil {
		t.Skipf("no GPU: %v", noGPU)
	}
	if setupErr != nil {
		t.Fatal(setupErr)
	}
}

func TestMain(m *testing.M) {
	cpu = runtime.NewCPU(0)
	cb, _ = kernels.NewCPUBackend(cpu)
	var err error
	if gdev, err = cuda.Open(0); err != nil {
		noGPU = err
		fmt.Fprintln(os.Stderr, "cudabackend tests need a GPU; skipping them:", err)
		os.Exit(m.Run())
	}
	if gb, err = New(gdev); err != nil {
		setupErr = err
	} else {
		fmt.Printf("GPU %s (cc %d, %d SMs); random seed %d\n", gdev.Model(), gdev.ComputeCapability(), gdev.Multiprocessors(), seed)
	}
	code := m.Run()
	if err := gdev.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "device close:", err)
		code = 1
	}
	os.Exit(code)
}

func newRNG(t *testing.T) *rand.Rand {
	h := seed
	for _, c := range t.Name() {
		h = h*31 + uint64(c)
	}
	return rand.New(rand.NewPCG(h, h^0x9e3779b97f4a7c15))
}

// randBF16 returns n values uniform in ±scale, rounded to bf16.
func randBF16(rng *rand.Rand, n int, scale float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = runtime.BF16ToF32(runtime.F32ToBF16((rng.Float32()*2 - 1) * scale))
	}
	return v
}

func bf16Bytes(v []float32) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		h := runtime.F32ToBF16(x)
		b[2*i], b[2*i+1] = byte(h), byte(h>>8)
	}
	return b
}

func f32Bytes(v []float32) []byte {
	if len(v) == 0 {
		return nil
	}
	return append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))...)
}

// gpu makes a GPU tensor of dtype dt holding vals.
func gpu(t *testing.T, dt runtime.DType, vals []float32, shape ...int) *runtime.Tensor {
	t.Helper()
	x, err := runtime.NewTensor(gdev, dt, shape, "test "+t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(x.Buffer().Free)
	if vals == nil {
		return x
	}
	var data []byte
	switch dt {
	case runtime.BF16:
		data = bf16Bytes(vals)
	case runtime.F32:
		data = f32Bytes(vals)
	case runtime.F16:
		data = make([]byte, 2*len(vals))
		for i, v := range vals {
			h := float16.Fromfloat32(v).Bits()
			data[2*i], data[2*i+1] = byte(h), byte(h>>8)
		}
	default:
		t.Fatalf("gpu: dtype %v", dt)
	}
	if err := gb.WriteBytes(x, data); err != nil {
		t.Fatal(err)
	}
	return x
}

// poisoned makes a GPU tensor full of NaN.
func poisoned(t *testing.T, dt runtime.DType, shape ...int) *runtime.Tensor {
	t.Helper()
	x := gpu(t, dt, nil, shape...)
	if err := gb.Fill16(x, 0x7fc0); err != nil {
		t.Fatal(err)
	}
	return x
}

// host makes a CPU tensor of dtype dt (F32 or BF16) holding vals.
func host(t *testing.T, dt runtime.DType, vals []float32, shape ...int) *runtime.Tensor {
	t.Helper()
	x, err := runtime.NewTensor(cpu, dt, shape, "reference")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(x.Buffer().Free)
	switch dt {
	case runtime.F32:
		copy(x.F32(), vals)
	case runtime.BF16:
		for i, v := range vals {
			x.U16()[i] = runtime.F32ToBF16(v)
		}
	}
	return x
}

func read(t *testing.T, x *runtime.Tensor) []float32 {
	t.Helper()
	out := make([]float32, x.NumElements())
	if err := gb.ReadF32(out, x); err != nil {
		t.Fatal(err)
	}
	return out
}

// compare checks every element; NaN (an unwritten output) always fails.
func compare(t *testing.T, what string, got, want []float32, atol, rtol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	bad, worst := 0, 0.0
	for i := range got {
		g, w := float64(got[i]), float64(want[i])
		d := math.Abs(g - w)
		if math.IsNaN(g) || math.IsInf(g, 0) || d > atol+rtol*math.Abs(w) {
			if bad < 5 {
				t.Errorf("%s: element %d = %v, want %v (|diff| %.3g > %.3g)", what, i, g, w, d, atol+rtol*math.Abs(w))
			}
			bad++
		}
		if !math.IsNaN(d) {
			worst = max(worst, d)
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d elements out of tolerance", what, bad, len(got))
	}
	t.Logf("%s: %d elements, max |diff| %.3g", what, len(got), worst)
}

func TestMatMul(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	for _, c := range []struct {
		T, N, D int
		out     runtime.DType
	}{
		{1, 4096, 4096, runtime.BF16},  // persistent GEMV
		{1, 1000, 136, runtime.BF16},   // persistent GEMV, a short row
		{1, 3000, 512, runtime.F32},    // GEMV into F32 logits
		{1, 333, 100, runtime.BF16},    // D % 8 != 0: cuBLAS
		{7, 300, 256, runtime.BF16},    // cuBLAS
		{64, 512, 4096, runtime.BF16},  // cuBLAS
		{5, 1024, 1024, runtime.F32},   // cuBLAS into F32
		{1, 14336, 4096, runtime.BF16}, // Llama-3-8B gate/up shape
	} {
		t.Run(fmt.Sprintf("%dx%dx%d_%v", c.T, c.N, c.D, c.out), func(t *testing.T) {
			x := randBF16(rng, c.T*c.D, 1)
			w := randBF16(rng, c.N*c.D, float32(1/math.Sqrt(float64(c.D))))
			out := poisoned(t, c.out, c.T, c.N)
			if err := gb.MatMul(out, gpu(t, runtime.BF16, x, c.T, c.D), gpu(t, runtime.BF16, w, c.N, c.D)); err != nil {
				t.Fatal(err)
			}
			ref := host(t, runtime.F32, nil, c.T, c.N)
			if err := cb.MatMul(ref, host(t, runtime.F32, x, c.T, c.D), host(t, runtime.BF16, w, c.N, c.D)); err != nil {
				t.Fatal(err)
			}
			atol, rtol := 1e-4, 1e-4
			if c.out == runtime.BF16 {
				atol, rtol = 2e-3, 8e-3
			}
			compare(t, "MatMul", read(t, out), ref.F32(), atol, rtol)
		})
	}
}

// TestGEMVRowBlocks: the row-block one-token kernels (the tuning
// alternative to the persistent default) against the CPU.
func TestGEMVRowBlocks(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	gb.GEMVRowBlocks = true
	defer func() { gb.GEMVRowBlocks = false }()
	for _, c := range []struct {
		N, D int
		out  runtime.DType
	}{{4096, 4096, runtime.BF16}, {1000, 136, runtime.BF16}, {3001, 14336, runtime.BF16}, {5000, 512, runtime.F32}} {
		t.Run(fmt.Sprintf("%dx%d_%v", c.N, c.D, c.out), func(t *testing.T) {
			x := randBF16(rng, c.D, 1)
			w := randBF16(rng, c.N*c.D, float32(1/math.Sqrt(float64(c.D))))
			out := poisoned(t, c.out, 1, c.N)
			if err := gb.MatMul(out, gpu(t, runtime.BF16, x, 1, c.D), gpu(t, runtime.BF16, w, c.N, c.D)); err != nil {
				t.Fatal(err)
			}
			ref := host(t, runtime.F32, nil, 1, c.N)
			if err := cb.MatMul(ref, host(t, runtime.F32, x, 1, c.D), host(t, runtime.BF16, w, c.N, c.D)); err != nil {
				t.Fatal(err)
			}
			atol, rtol := 1e-4, 1e-4
			if c.out == runtime.BF16 {
				atol, rtol = 2e-3, 8e-3
			}
			compare(t, "MatMul row blocks", read(t, out), ref.F32(), atol, rtol)
		})
	}
}

// TestMatMulN: q, k and v of one token in one launch, and the fallback for
// several tokens, against three CPU MatMuls.
func TestMatMulN(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	const D = 1024
	Ns := []int{1024, 256, 256}
	for _, T := range []int{1, 3} {
		x := randBF16(rng, T*D, 1)
		var outs, ws, refs []*runtime.Tensor
		var wv [][]float32
		for _, N := range Ns {
			w := randBF16(rng, N*D, 0.03)
			wv = append(wv, w)
			outs = append(outs, poisoned(t, runtime.BF16, T, N))
			ws = append(ws, gpu(t, runtime.BF16, w, N, D))
			refs = append(refs, host(t, runtime.F32, nil, T, N))
		}
		if err := gb.MatMulN(outs, gpu(t, runtime.BF16, x, T, D), ws); err != nil {
			t.Fatal(err)
		}
		for i, N := range Ns {
			if err := cb.MatMul(refs[i], host(t, runtime.F32, x, T, D), host(t, runtime.BF16, wv[i], N, D)); err != nil {
				t.Fatal(err)
			}
			compare(t, fmt.Sprintf("T=%d projection %d", T, i), read(t, outs[i]), refs[i].F32(), 2e-3, 8e-3)
		}
	}
}

// TestGateUpSiLU: the fused one-token MLP head against gate, up and SiLUMul
// on the CPU.
func TestGateUpSiLU(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	for _, c := range []struct{ I, D int }{{14336, 4096}, {352, 128}, {1000, 264}} {
		t.Run(fmt.Sprintf("%dx%d", c.I, c.D), func(t *testing.T) {
			x := randBF16(rng, c.D, 2)
			wg, wu := randBF16(rng, c.I*c.D, 0.05), randBF16(rng, c.I*c.D, 0.05)
			out := poisoned(t, runtime.BF16, 1, c.I)
			if err := gb.GateUpSiLU(out, gpu(t, runtime.BF16, x, 1, c.D), gpu(t, runtime.BF16, wg, c.I, c.D), gpu(t, runtime.BF16, wu, c.I, c.D)); err != nil {
				t.Fatal(err)
			}
			g, u := host(t, runtime.F32, nil, 1, c.I), host(t, runtime.F32, nil, 1, c.I)
			hx := host(t, runtime.F32, x, 1, c.D)
			if err := cb.MatMul(g, hx, host(t, runtime.BF16, wg, c.I, c.D)); err != nil {
				t.Fatal(err)
			}
			if err := cb.MatMul(u, hx, host(t, runtime.BF16, wu, c.I, c.D)); err != nil {
				t.Fatal(err)
			}
			if err := cb.SiLUMul(g, g, u); err != nil {
				t.Fatal(err)
			}
			compare(t, "GateUpSiLU", read(t, out), g.F32(), 2e-3, 8e-3)
		})
	}
}

func TestRMSNorm(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	for _, c := range []struct {
		rows, dim int
		x         runtime.DType
	}{{1, 4096, runtime.BF16}, {7, 4096, runtime.BF16}, {3, 100, runtime.BF16}, {2048, 128, runtime.BF16},
		{1, 4096, runtime.F32}, {5, 100, runtime.F32}, {2048, 128, runtime.F32}} {
		t.Run(fmt.Sprintf("%dx%d_%v", c.rows, c.dim, c.x), func(t *testing.T) {
			x := randBF16(rng, c.rows*c.dim, 3)
			if c.x == runtime.F32 {
				for i := range x {
					x[i] += rng.Float32() * 1e-3 // not bf16-representable
				}
			}
			w := randBF16(rng, c.dim, 1.5)
			out := poisoned(t, runtime.BF16, c.rows, c.dim)
			if err := gb.RMSNorm(out, gpu(t, c.x, x, c.rows, c.dim), gpu(t, runtime.BF16, w, c.dim), 1e-5); err != nil {
				t.Fatal(err)
			}
			ref := host(t, runtime.F32, nil, c.rows, c.dim)
			if err := cb.RMSNorm(ref, host(t, runtime.F32, x, c.rows, c.dim), host(t, runtime.BF16, w, c.dim), 1e-5); err != nil {
				t.Fatal(err)
			}
			compare(t, "RMSNorm", read(t, out), ref.F32(), 1e-3, 8e-3)
		})
	}
}

func TestEmbedding(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	const V, D = 1000, 264
	table := randBF16(rng, V*D, 1)
	ids := make([]int32, 37)
	for i := range ids {
		ids[i] = int32(rng.IntN(V))
	}
	gt := gpu(t, runtime.BF16, table, V, D)
	ref := host(t, runtime.F32, nil, len(ids), D)
	if err := cb.Embedding(ref, host(t, runtime.BF16, table, V, D), ids); err != nil {
		t.Fatal(err)
	}
	for _, dt := range []runtime.DType{runtime.BF16, runtime.F32} {
		out := poisoned(t, dt, len(ids), D)
		if err := gb.Embedding(out, gt, ids); err != nil {
			t.Fatal(err)
		}
		compare(t, "Embedding into "+dt.String(), read(t, out), ref.F32(), 0, 0)
	}
	// one row of 4,096 (a decode step: the row over 16 blocks) and a row of 264
	// over two
	const W = 4096
	wide := randBF16(rng, 50*W, 1)
	gw := gpu(t, runtime.BF16, wide, 50, W)
	for _, c := range []struct {
		table []float32
		gt    *runtime.Tensor
		D     int
	}{{wide, gw, W}, {table, gt, D}} {
		for _, id := range []int32{0, 7, int32(c.gt.Dim(0) - 1)} {
			want := c.table[int(id)*c.D : int(id+1)*c.D]
			for _, dt := range []runtime.DType{runtime.BF16, runtime.F32} {
				out := poisoned(t, dt, 1, c.D)
				if err := gb.Embedding(out, c.gt, []int32{id}); err != nil {
					t.Fatal(err)
				}
				compare(t, fmt.Sprintf("one row of %d (id %d) into %v", c.D, id, dt), read(t, out), want, 0, 0)
			}
		}
	}
	if err := gb.Embedding(poisoned(t, runtime.BF16, 2, D), gt, []int32{3, V}); err == nil || !strings.Contains(err.Error(), "outside the vocabulary") {
		t.Errorf("id %d: error %v, want one naming the vocabulary", V, err)
	}
}

func ropeTables(t *testing.T, d int) map[string][]float32 {
	def, err := kernels.RopeInvFreq(d, 500000, kernels.RopeScaling{Type: "default"})
	if err != nil {
		t.Fatal(err)
	}
	l3, err := kernels.RopeInvFreq(d, 500000, kernels.RopeScaling{Type: "llama3", Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192})
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]float32{"default": def, "llama3": l3}
}

func TestRoPE(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	for name, inv := range ropeTables(t, 128) {
		for _, c := range []struct{ T, H, pos0 int }{{1, 32, 511}, {5, 8, 17}, {64, 4, 3000}} {
			t.Run(fmt.Sprintf("%s_T%d_pos%d", name, c.T, c.pos0), func(t *testing.T) {
				x := randBF16(rng, c.T*c.H*128, 2)
				g := gpu(t, runtime.BF16, x, c.T, c.H, 128)
				if err := gb.RoPE(g, c.pos0, inv); err != nil {
					t.Fatal(err)
				}
				ref := host(t, runtime.F32, x, c.T, c.H, 128)
				if err := cb.RoPE(ref, c.pos0, inv); err != nil {
					t.Fatal(err)
				}
				compare(t, "RoPE", read(t, g), ref.F32(), 1e-3, 8e-3)
			})
		}
	}
}

// TestStoreKV: the rows written equal x exactly and every other row still
// holds the poison.
func TestStoreKV(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	const C, K, d, T, pos0 = 40, 4, 64, 5, 10
	x := randBF16(rng, T*K*d, 1)
	cache := poisoned(t, runtime.BF16, C, K, d)
	if err := gb.StoreKV(cache, gpu(t, runtime.BF16, x, T, K, d), pos0); err != nil {
		t.Fatal(err)
	}
	got := read(t, cache)
	row := K * d
	for i, v := range got {
		p := i / row
		if p >= pos0 && p < pos0+T {
			if v != x[(p-pos0)*row+i%row] {
				t.Fatalf("cache element %d (position %d) = %v, want %v", i, p, v, x[(p-pos0)*row+i%row])
			}
		} else if !math.IsNaN(float64(v)) {
			t.Fatalf("cache element %d (position %d, not stored) = %v, want the poison", i, p, v)
		}
	}
	if err := gb.StoreKV(cache, gpu(t, runtime.BF16, x, T, K, d), C-2); err == nil {
		t.Error("StoreKV past the capacity succeeded")
	}
}

func TestRoPEStoreKV(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	const C, H, K, d, T, pos0 = 64, 8, 2, 128, 6, 20
	inv := ropeTables(t, d)["llama3"]
	q, k, v := randBF16(rng, T*H*d, 2), randBF16(rng, T*K*d, 2), randBF16(rng, T*K*d, 2)
	gq, gk, gv := gpu(t, runtime.BF16, q, T, H, d), gpu(t, runtime.BF16, k, T, K, d), gpu(t, runtime.BF16, v, T, K, d)
	kc, vc := poisoned(t, runtime.BF16, C, K, d), poisoned(t, runtime.BF16, C, K, d)
	if err := gb.RoPEStoreKV(gq, gk, gv, kc, vc, pos0, inv); err != nil {
		t.Fatal(err)
	}
	rq, rk, rv := host(t, runtime.F32, q, T, H, d), host(t, runtime.F32, k, T, K, d), host(t, runtime.F32, v, T, K, d)
	rkc, rvc := host(t, runtime.F32, nil, C, K, d), host(t, runtime.F32, nil, C, K, d)
	for _, f := range []func() error{
		func() error { return cb.RoPE(rq, pos0, inv) }, func() error { return cb.RoPE(rk, pos0, inv) },
		func() error { return cb.StoreKV(rkc, rk, pos0) }, func() error { return cb.StoreKV(rvc, rv, pos0) },
	} {
		if err := f(); err != nil {
			t.Fatal(err)
		}
	}
	compare(t, "q", read(t, gq), rq.F32(), 1e-3, 8e-3)
	compare(t, "k", read(t, gk), rk.F32(), 1e-3, 8e-3)
	row := K * d
	gotK, gotV := read(t, kc), read(t, vc)
	compare(t, "k cache rows", gotK[pos0*row:(pos0+T)*row], rkc.F32()[pos0*row:(pos0+T)*row], 1e-3, 8e-3)
	compare(t, "v cache rows", gotV[pos0*row:(pos0+T)*row], rvc.F32()[pos0*row:(pos0+T)*row], 0, 0)
	for i := range gotK {
		if p := i / row; (p < pos0 || p >= pos0+T) && (!math.IsNaN(float64(gotK[i])) || !math.IsNaN(float64(gotV[i]))) {
			t.Fatalf("cache element %d (position %d) was written", i, p)
		}
	}
}

func TestAttention(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	for _, c := range []struct {
		name                string
		T, pos0, C, H, K, d int
		noFlash             bool
		window              int // 0: full causal attention
	}{
		{"decode first", 1, 0, 16, 8, 2, 128, false, 0},
		{"decode ctx 512", 1, 511, 600, 32, 8, 128, false, 0},
		{"decode ctx 2000 d64", 1, 1999, 2048, 8, 1, 64, false, 0},
		{"decode G16", 1, 300, 400, 16, 1, 32, false, 0},
		{"flash prefill 77", 77, 0, 100, 8, 2, 128, false, 0},
		{"flash chunk 130 at 37 d64", 130, 37, 200, 4, 4, 64, false, 0},
		{"flash prefill 65 d32", 65, 0, 65, 4, 2, 32, false, 0},
		{"flash prefill 512", 512, 0, 512, 32, 8, 128, false, 0},
		{"split kernel T20", 20, 5, 40, 8, 2, 128, true, 0},
		{"split kernel d96", 9, 3, 16, 4, 2, 96, false, 0},
		{"window 8 decode ctx 512", 1, 511, 600, 32, 8, 128, false, 8},
		{"window 100 decode ctx 2000 d64", 1, 1999, 2048, 8, 1, 64, false, 100},
		{"window 8 flash prefill 77", 77, 0, 100, 8, 2, 128, false, 8},
		{"window 40 flash chunk 130 at 37 d64", 130, 37, 200, 4, 4, 64, false, 40},
		{"window 5 split kernel T20", 20, 5, 40, 8, 2, 128, true, 5},
		{"window 3 d32 prefill 65", 65, 0, 65, 4, 2, 32, false, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := c.pos0 + c.T
			q := randBF16(rng, c.T*c.H*c.d, 2)
			kv := randBF16(rng, 2*c.C*c.K*c.d, 2)
			kc, vc := kv[:c.C*c.K*c.d], kv[c.C*c.K*c.d:]
			// Rows past the context are poison on the GPU: they must not be read.
			gkc, gvc := poisoned(t, runtime.BF16, c.C, c.K, c.d), poisoned(t, runtime.BF16, c.C, c.K, c.d)
			row := c.K * c.d
			gkcFill, err := gkc.Slice(0, n)
			if err != nil {
				t.Fatal(err)
			}
			gvcFill, _ := gvc.Slice(0, n)
			if err := gb.WriteBytes(gkcFill, bf16Bytes(kc[:n*row])); err != nil {
				t.Fatal(err)
			}
			if err := gb.WriteBytes(gvcFill, bf16Bytes(vc[:n*row])); err != nil {
				t.Fatal(err)
			}
			out := poisoned(t, runtime.BF16, c.T, c.H, c.d)
			gb.noFlash = c.noFlash
			err = gb.AttentionWindow(out, gpu(t, runtime.BF16, q, c.T, c.H, c.d), gkc, gvc, c.pos0, c.window)
			gb.noFlash = false
			if err != nil {
				t.Fatal(err)
			}
			ref := host(t, runtime.F32, nil, c.T, c.H, c.d)
			if err := cb.AttentionWindow(ref, host(t, runtime.F32, q, c.T, c.H, c.d), host(t, runtime.F32, kc, c.C, c.K, c.d),
				host(t, runtime.F32, vc, c.C, c.K, c.d), c.pos0, c.window); err != nil {
				t.Fatal(err)
			}
			compare(t, "Attention", read(t, out), ref.F32(), 1e-2, 2e-2)
		})
	}
}

func TestSiLUMulAdd(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	for _, n := range []int{4096 * 3, 1001} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			a, b := randBF16(rng, n, 6), randBF16(rng, n, 3)
			ga, gbuf := gpu(t, runtime.BF16, a, n), gpu(t, runtime.BF16, b, n)
			out := poisoned(t, runtime.BF16, n)
			if err := gb.Add(out, ga, gbuf); err != nil {
				t.Fatal(err)
			}
			ref := host(t, runtime.F32, nil, n)
			if err := cb.Add(ref, host(t, runtime.F32, a, n), host(t, runtime.F32, b, n)); err != nil {
				t.Fatal(err)
			}
			compare(t, "Add", read(t, out), ref.F32(), 1e-6, 4e-3)
			// SiLUMul in place over gate, as the model calls it.
			if err := gb.SiLUMul(ga, ga, gbuf); err != nil {
				t.Fatal(err)
			}
			if err := cb.SiLUMul(ref, host(t, runtime.F32, a, n), host(t, runtime.F32, b, n)); err != nil {
				t.Fatal(err)
			}
			compare(t, "SiLUMul", read(t, ga), ref.F32(), 1e-6, 4e-3)
			// F32 (the residual stream): exact fp32 sums.
			fa, fb := make([]float32, n), make([]float32, n)
			for i := range fa {
				fa[i], fb[i] = rng.Float32()*4-2, rng.Float32()*4-2
			}
			gfa := gpu(t, runtime.F32, fa, n)
			if err := gb.Add(gfa, gfa, gpu(t, runtime.F32, fb, n)); err != nil {
				t.Fatal(err)
			}
			if err := cb.Add(ref, host(t, runtime.F32, fa, n), host(t, runtime.F32, fb, n)); err != nil {
				t.Fatal(err)
			}
			compare(t, "Add F32", read(t, gfa), ref.F32(), 0, 0)
		})
	}
}

// TestCast: conversions between F32, F16 and BF16 round to nearest even,
// bit for bit like the host's.
func TestCast(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	const n = 10007
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(7)-3)))
	}
	src := gpu(t, runtime.F32, v, n)
	toBF := poisoned(t, runtime.BF16, n)
	toH := poisoned(t, runtime.F16, n)
	if err := gb.Cast(toBF, src); err != nil {
		t.Fatal(err)
	}
	if err := gb.Cast(toH, src); err != nil {
		t.Fatal(err)
	}
	back := poisoned(t, runtime.F32, n)
	if err := gb.Cast(back, toBF); err != nil {
		t.Fatal(err)
	}
	hToBF := poisoned(t, runtime.BF16, n)
	if err := gb.Cast(hToBF, toH); err != nil {
		t.Fatal(err)
	}
	wantBF, wantH, wantHB := make([]float32, n), make([]float32, n), make([]float32, n)
	for i, x := range v {
		wantBF[i] = runtime.BF16ToF32(runtime.F32ToBF16(x))
		wantH[i] = float16.Fromfloat32(x).Float32()
		wantHB[i] = runtime.BF16ToF32(runtime.F32ToBF16(wantH[i]))
	}
	compare(t, "F32→BF16", read(t, toBF), wantBF, 0, 0)
	compare(t, "F32→F16", read(t, toH), wantH, 0, 0)
	compare(t, "BF16→F32", read(t, back), wantBF, 0, 0)
	compare(t, "F16→BF16", read(t, hToBF), wantHB, 0, 0)
}

func TestArgmaxRows(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	const R, V = 5, 128256
	x := randBF16(rng, R*V, 10)
	x[1*V+7] = float32(math.NaN())
	x[2*V+5], x[2*V+900] = 20, 20                   // a tie: the first wins
	x[4*V+3], x[4*V+11] = float32(math.Inf(-1)), 30 // −Inf is an ordinary low logit
	for i := 3 * V; i < 4*V; i++ {
		x[i] = float32(math.NaN())
	}
	for _, dt := range []runtime.DType{runtime.BF16, runtime.F32} {
		got := make([]int32, R)
		if err := gb.ArgmaxRows(got, gpu(t, dt, x, R, V)); err != nil {
			t.Fatal(err)
		}
		for r := range R {
			want := int32(kernels.Argmax(x[r*V : (r+1)*V]))
			if r == 1 || r == 3 {
				want = -1 // a NaN in the row: no greedy choice
			}
			if got[r] != want {
				t.Errorf("%v row %d: argmax %d, want %d", dt, r, got[r], want)
			}
		}
	}
}

// TestArgmaxRowsShapes: rows few and many, vocabularies below and above
// argmax_rows_split's threshold, equal maxima at the two sides of a split
// boundary (the first wins), a row of −Inf (−1), each call twice (the
// split's counters reset themselves), against kernels.Argmax.
func TestArgmaxRowsShapes(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	for _, V := range []int{500, 8192, 8193, 128256} {
		for _, R := range []int{1, 3, 70} {
			x := randBF16(rng, R*V, 10)
			S, chunk := argmaxSplitGrid(R, V)
			for r := range R {
				if S > 1 && r%2 == 0 {
					x[r*V+chunk], x[r*V+chunk-1] = 50, 50 // the first index wins
				}
			}
			if R > 1 {
				for i := V; i < 2*V; i++ {
					x[i] = float32(math.Inf(-1))
				}
			}
			for _, dt := range []runtime.DType{runtime.BF16, runtime.F32} {
				xt := gpu(t, dt, x, R, V)
				for call := range 2 {
					got := make([]int32, R)
					if err := gb.ArgmaxRows(got, xt); err != nil {
						t.Fatal(err)
					}
					for r := range R {
						want := int32(kernels.Argmax(x[r*V : (r+1)*V]))
						if r == 1 {
							want = -1 // only −Inf
						}
						if got[r] != want {
							t.Errorf("V %d R %d (%d blocks a row) %v call %d row %d: %d, want %d", V, R, S, dt, call, r, got[r], want)
						}
					}
				}
			}
		}
	}
}

func TestFillUniform(t *testing.T) {
	needGPU(t)
	const n = 1 << 20
	x := poisoned(t, runtime.BF16, n)
	if err := gb.FillUniform(x, 42, -0.5, 0.5); err != nil {
		t.Fatal(err)
	}
	v := read(t, x)
	var sum float64
	distinct := map[float32]bool{}
	for i, f := range v {
		if !(f >= -0.5 && f <= 0.5) {
			t.Fatalf("element %d = %v outside [-0.5, 0.5]", i, f)
		}
		sum += float64(f)
		distinct[f] = true
	}
	if m := sum / n; math.Abs(m) > 0.01 || len(distinct) < 1000 {
		t.Fatalf("mean %v, %d distinct values: not uniform", m, len(distinct))
	}
}

// TestCapturedStep: a graph of Embedding, RoPEStoreKV and Attention captured
// once replays at other positions exactly as the eager ops run there.
func TestCapturedStep(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	const C, H, K, d, V = 256, 8, 2, 128, 500
	inv := ropeTables(t, d)["default"]
	table := randBF16(rng, V*H*d, 1)
	gt := gpu(t, runtime.BF16, table, V, H*d)
	kvInit := randBF16(rng, C*K*d, 1)
	type state struct{ q, k, v, kc, vc, out *runtime.Tensor }
	mk := func() state {
		s := state{q: gpu(t, runtime.BF16, nil, 1, H, d), k: gpu(t, runtime.BF16, randBF16(rng, K*d, 1), 1, K, d),
			v: gpu(t, runtime.BF16, randBF16(rng, K*d, 1), 1, K, d), kc: gpu(t, runtime.BF16, kvInit, C, K, d),
			vc: gpu(t, runtime.BF16, kvInit, C, K, d), out: poisoned(t, runtime.BF16, 1, H, d)}
		return s
	}
	step := func(s state, ids []int32, pos int) error {
		q2, _ := s.q.Reshape(1, H*d)
		if err := gb.Embedding(q2, gt, ids); err != nil {
			return err
		}
		if err := gb.RoPEStoreKV(s.q, s.k, s.v, s.kc, s.vc, pos, inv); err != nil {
			return err
		}
		return gb.Attention(s.out, s.q, s.kc, s.vc, pos)
	}
	g1, g2 := mk(), mk() // g1 replays the graph, g2 runs the same steps eagerly
	graph, err := gb.CaptureStep(func() error { return step(g1, []int32{0}, 3) })
	if err != nil {
		t.Fatal(err)
	}
	defer graph.Close()
	for _, c := range []struct {
		id  int32
		pos int
	}{{17, 100}, {499, 7}, {3, 254}} {
		// k and v are rotated in place by each step: restore them.
		kIn, vIn := randBF16(rng, K*d, 1), randBF16(rng, K*d, 1)
		for _, s := range []state{g1, g2} {
			if err := gb.WriteBytes(s.k, bf16Bytes(kIn)); err != nil {
				t.Fatal(err)
			}
			if err := gb.WriteBytes(s.v, bf16Bytes(vIn)); err != nil {
				t.Fatal(err)
			}
		}
		if err := gb.SetStep([]int32{c.id}, c.pos); err != nil {
			t.Fatal(err)
		}
		if err := graph.Replay(); err != nil {
			t.Fatal(err)
		}
		if err := step(g2, []int32{c.id}, c.pos); err != nil {
			t.Fatal(err)
		}
		compare(t, fmt.Sprintf("replay at %d", c.pos), read(t, g1.out), read(t, g2.out), 0, 0)
		compare(t, fmt.Sprintf("k cache at %d", c.pos), read(t, g1.kc), read(t, g2.kc), 0, 0)
	}
}

// TestWeightDTypeError: weights in a dtype the kernels lack are an error that
// names it and what the kernels take.
func TestWeightDTypeError(t *testing.T) {
	needGPU(t)
	x := gpu(t, runtime.BF16, make([]float32, 64), 1, 64)
	for _, dt := range []runtime.DType{runtime.F16, runtime.F32} {
		w := gpu(t, dt, make([]float32, 64*8), 8, 64)
		err := gb.MatMul(poisoned(t, runtime.BF16, 1, 8), x, w)
		if err == nil || !strings.Contains(err.Error(), dt.String()) || !strings.Contains(err.Error(), "BF16 weights") {
			t.Errorf("MatMul with %v weights: error %v", dt, err)
		}
	}
}

func TestAddBias(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	for _, c := range []struct{ rows, cols int }{{1, 4096}, {7, 1000}, {33, 128}} {
		t.Run(fmt.Sprintf("%dx%d", c.rows, c.cols), func(t *testing.T) {
			x, bias := randBF16(rng, c.rows*c.cols, 2), randBF16(rng, c.cols, 1)
			gx := gpu(t, runtime.BF16, x, c.rows, c.cols)
			if err := gb.AddBias(gx, gpu(t, runtime.BF16, bias, c.cols)); err != nil {
				t.Fatal(err)
			}
			ref := host(t, runtime.F32, x, c.rows, c.cols)
			if err := cb.AddBias(ref, host(t, runtime.F32, bias, c.cols)); err != nil {
				t.Fatal(err)
			}
			compare(t, "AddBias", read(t, gx), ref.F32(), 1e-2, 1e-2)
		})
	}
}

// pagedSeq is one sequence of a paged-attention case: nq new queries at the
// end of ctx positions (ctx > nq: a chunk after a cached prefix).
type pagedSeq struct{ nq, ctx int }

// pagedLayout hands the sequences' blocks out of a pool of P = blocks·bs
// rows in a shuffled order and fills the rows they use with random bf16
// values; every other row is NaN, so a kernel reading outside the block
// tables poisons its output.
func pagedLayout(rng *rand.Rand, seqs []pagedSeq, K, d, bs int) (kernels.PagedKV, []int32, []float32, []float32, int) {
	maxBlocks, used := 1, 0
	for _, s := range seqs {
		maxBlocks = max(maxBlocks, (s.ctx+bs-1)/bs)
		used += (s.ctx + bs - 1) / bs
	}
	blocks := used + 5
	perm := rng.Perm(blocks)
	kv := kernels.PagedKV{BlockSize: bs, MaxBlocks: maxBlocks, BlockTable: make([]int32, len(seqs)*maxBlocks)}
	row := K * d
	kp, vp := make([]float32, blocks*bs*row), make([]float32, blocks*bs*row)
	for i := range kp {
		kp[i], vp[i] = float32(math.NaN()), float32(math.NaN())
	}
	qStarts := []int32{0}
	next := 0
	for i, s := range seqs {
		for blk := range (s.ctx + bs - 1) / bs {
			kv.BlockTable[i*maxBlocks+blk] = int32(perm[next])
			next++
		}
		for p := range s.ctx {
			r := int(kv.BlockTable[i*maxBlocks+p/bs])*bs + p%bs
			copy(kp[r*row:(r+1)*row], randBF16(rng, row, 2))
			copy(vp[r*row:(r+1)*row], randBF16(rng, row, 2))
		}
		kv.SeqLens = append(kv.SeqLens, int32(s.ctx))
		qStarts = append(qStarts, qStarts[i]+int32(s.nq))
	}
	return kv, qStarts, kp, vp, blocks * bs
}

// TestPagedAttention: batched decode and packed varlen prefill over a paged
// pool with shuffled block tables and mixed lengths (prefills from 0,
// chunks after a cached prefix, single decode steps), with and without a
// sliding window, through the flash, staged-decode and generic split
// kernels, against the CPU reference; pool rows outside the tables are NaN.
func TestPagedAttention(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	dec := func(ctxs ...int) []pagedSeq {
		var s []pagedSeq
		for _, c := range ctxs {
			s = append(s, pagedSeq{1, c})
		}
		return s
	}
	for _, c := range []struct {
		name                string
		H, K, d, bs, window int
		noFlash             bool
		seqs                []pagedSeq
	}{
		{"decode d128 mixed", 32, 8, 128, 16, 0, false, dec(1, 17, 512, 300, 64, 2)},
		{"decode d64 long", 8, 1, 64, 16, 0, false, dec(2000, 5)},
		{"decode d32 generic", 4, 2, 32, 4, 0, false, dec(23, 9, 1, 40)},
		{"decode d96 generic G16", 16, 1, 96, 8, 0, false, dec(333, 50, 7)},
		{"decode d128 window 8", 32, 8, 128, 16, 8, false, dec(1, 17, 512, 300)},
		{"decode d64 window 100", 8, 1, 64, 16, 100, false, dec(2000, 99, 101)},
		{"decode d32 window 3", 4, 2, 32, 4, 3, false, dec(23, 2, 9)},
		{"decode d128 split kernel", 32, 8, 128, 16, 0, true, dec(1, 200, 77)},
		{"varlen d128", 32, 8, 128, 16, 0, false, []pagedSeq{{77, 77}, {130, 167}, {1, 40}, {64, 64}, {5, 300}}},
		{"varlen d64 chunks", 4, 4, 64, 16, 0, false, []pagedSeq{{130, 167}, {65, 65}, {3, 500}}},
		{"varlen d32", 4, 2, 32, 4, 0, false, []pagedSeq{{23, 23}, {3, 3}, {12, 12}, {9, 9}, {1, 30}}},
		{"varlen d128 window 8", 32, 8, 128, 16, 8, false, []pagedSeq{{77, 77}, {130, 167}, {1, 40}}},
		{"varlen d64 window 40", 4, 4, 64, 16, 40, false, []pagedSeq{{130, 167}, {65, 65}, {3, 500}}},
		{"varlen d32 window 3", 4, 2, 32, 4, 3, false, []pagedSeq{{23, 23}, {12, 30}}},
		{"varlen d128 split kernel", 8, 2, 128, 16, 0, true, []pagedSeq{{20, 25}, {7, 7}, {1, 9}}},
		{"varlen d96 split kernel window 5", 4, 2, 96, 8, 5, false, []pagedSeq{{9, 12}, {4, 4}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			kv, qStarts, kp, vp, P := pagedLayout(rng, c.seqs, c.K, c.d, c.bs)
			T := int(qStarts[len(c.seqs)])
			q := randBF16(rng, T*c.H*c.d, 2)
			ref := host(t, runtime.F32, nil, T, c.H, c.d)
			hq := host(t, runtime.F32, q, T, c.H, c.d)
			hk, hv := host(t, runtime.F32, kp, P, c.K, c.d), host(t, runtime.F32, vp, P, c.K, c.d)
			if err := cb.VarlenPrefillAttention(ref, hq, hk, hv, qStarts, kv, c.window); err != nil {
				t.Fatal(err)
			}
			gq := gpu(t, runtime.BF16, q, T, c.H, c.d)
			gk, gv := gpu(t, runtime.BF16, kp, P, c.K, c.d), gpu(t, runtime.BF16, vp, P, c.K, c.d)
			gb.noFlash = c.noFlash
			defer func() { gb.noFlash = false }()
			out := poisoned(t, runtime.BF16, T, c.H, c.d)
			if err := gb.VarlenPrefillAttention(out, gq, gk, gv, qStarts, kv, c.window); err != nil {
				t.Fatal(err)
			}
			compare(t, "VarlenPrefillAttention", read(t, out), ref.F32(), 1e-2, 2e-2)
			if T == len(c.seqs) { // one query each: a decode step
				out := poisoned(t, runtime.BF16, T, c.H, c.d)
				if err := gb.PagedDecodeAttention(out, gq, gk, gv, kv, c.window); err != nil {
					t.Fatal(err)
				}
				compare(t, "PagedDecodeAttention", read(t, out), ref.F32(), 1e-2, 2e-2)
				// Again with the tables the backend holds already (reused,
				// not uploaded), as every layer after the first does.
				out2 := poisoned(t, runtime.BF16, T, c.H, c.d)
				if err := gb.PagedDecodeAttention(out2, gq, gk, gv, kv, c.window); err != nil {
					t.Fatal(err)
				}
				compare(t, "PagedDecodeAttention again", read(t, out2), ref.F32(), 1e-2, 2e-2)
			}
		})
	}
}

// TestPagedAttentionBadTable: a block outside the pool and a sequence with
// fewer positions than queries are errors, found before any kernel reads
// through the table.
func TestPagedAttentionBadTable(t *testing.T) {
	needGPU(t)
	const H, K, d, bs = 4, 2, 64, 16
	q := gpu(t, runtime.BF16, make([]float32, 2*H*d), 2, H, d)
	kp, vp := gpu(t, runtime.BF16, nil, 4*bs, K, d), gpu(t, runtime.BF16, nil, 4*bs, K, d)
	out := poisoned(t, runtime.BF16, 2, H, d)
	bad := kernels.PagedKV{BlockSize: bs, MaxBlocks: 2, BlockTable: []int32{0, 1, 9, 3}, SeqLens: []int32{20, 20}}
	if err := gb.PagedDecodeAttention(out, q, kp, vp, bad, 0); err == nil || !strings.Contains(err.Error(), "block 9 of a pool of 4") {
		t.Errorf("decode with block 9 of 4: error %v", err)
	}
	short := kernels.PagedKV{BlockSize: bs, MaxBlocks: 2, BlockTable: []int32{0, 1, 2, 3}, SeqLens: []int32{1, 20}}
	if err := gb.VarlenPrefillAttention(out, q, kp, vp, []int32{0, 2, 2}, short, 0); err == nil || !strings.Contains(err.Error(), "2 queries and 1 positions") {
		t.Errorf("varlen with more queries than positions: error %v", err)
	}
}

// TestRoPEStoreKVAtGPU: a batch's tokens at unrelated positions rotated and
// stored at unrelated pool rows in one launch, against the CPU reference;
// rows not named stay poisoned.
func TestRoPEStoreKVAtGPU(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	const P, H, K, d = 96, 8, 2, 128
	inv := ropeTables(t, d)["llama3"]
	positions := []int32{0, 511, 3, 4, 5, 3000, 17}
	slots := []int32{95, 0, 40, 41, 42, 7, 64}
	T := len(positions)
	q, k, v := randBF16(rng, T*H*d, 2), randBF16(rng, T*K*d, 2), randBF16(rng, T*K*d, 2)
	gq, gk, gv := gpu(t, runtime.BF16, q, T, H, d), gpu(t, runtime.BF16, k, T, K, d), gpu(t, runtime.BF16, v, T, K, d)
	kp, vp := poisoned(t, runtime.BF16, P, K, d), poisoned(t, runtime.BF16, P, K, d)
	if err := gb.RoPEStoreKVAt(gq, gk, gv, kp, vp, positions, slots, inv); err != nil {
		t.Fatal(err)
	}
	rq, rk, rv := host(t, runtime.F32, q, T, H, d), host(t, runtime.F32, k, T, K, d), host(t, runtime.F32, v, T, K, d)
	rkp, rvp := host(t, runtime.F32, nil, P, K, d), host(t, runtime.F32, nil, P, K, d)
	if err := cb.RoPEStoreKVAt(rq, rk, rv, rkp, rvp, positions, slots, inv); err != nil {
		t.Fatal(err)
	}
	compare(t, "q", read(t, gq), rq.F32(), 1e-3, 8e-3)
	compare(t, "k", read(t, gk), rk.F32(), 1e-3, 8e-3)
	row := K * d
	gotK, gotV := read(t, kp), read(t, vp)
	named := map[int]bool{}
	for _, s := range slots {
		r := int(s)
		named[r] = true
		compare(t, fmt.Sprintf("k pool row %d", r), gotK[r*row:(r+1)*row], rkp.F32()[r*row:(r+1)*row], 1e-3, 8e-3)
		compare(t, fmt.Sprintf("v pool row %d", r), gotV[r*row:(r+1)*row], rvp.F32()[r*row:(r+1)*row], 0, 0)
	}
	for i := range gotK {
		if r := i / row; !named[r] && (!math.IsNaN(float64(gotK[i])) || !math.IsNaN(float64(gotV[i]))) {
			t.Fatalf("pool element %d (row %d) was written", i, r)
		}
	}
	if err := gb.RoPEStoreKVAt(gq, gk, gv, kp, vp, positions, []int32{95, 0, 40, 41, 42, 7, 96}, inv); err == nil || !strings.Contains(err.Error(), "pool row 96 of 96") {
		t.Errorf("slot past the pool: error %v", err)
	}
}

// TestRoPEStoreKVAtHalvesGPU: RoPEStoreKVAt with q left out, and with k, v
// and the pools left out, gives the whole call's keys, values, pools and
// queries bit for bit, at a head width of the 16-byte kernel (128) and of
// the other (24).
func TestRoPEStoreKVAtHalvesGPU(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	for _, d := range []int{128, 24} {
		t.Run(fmt.Sprint("d", d), func(t *testing.T) {
			const P, H, K = 64, 8, 2
			inv := make([]float32, d/2)
			for i := range inv {
				inv[i] = float32(math.Pow(10000, -2*float64(i)/float64(d)))
			}
			positions := []int32{511, 0, 7, 300}
			slots := []int32{3, 60, 0, 31}
			T := len(positions)
			q, k, v := randBF16(rng, T*H*d, 2), randBF16(rng, T*K*d, 2), randBF16(rng, T*K*d, 2)
			wq, wk, wv := gpu(t, runtime.BF16, q, T, H, d), gpu(t, runtime.BF16, k, T, K, d), gpu(t, runtime.BF16, v, T, K, d)
			wkp, wvp := poisoned(t, runtime.BF16, P, K, d), poisoned(t, runtime.BF16, P, K, d)
			if err := gb.RoPEStoreKVAt(wq, wk, wv, wkp, wvp, positions, slots, inv); err != nil {
				t.Fatal(err)
			}
			hk, hv := gpu(t, runtime.BF16, k, T, K, d), gpu(t, runtime.BF16, v, T, K, d)
			hkp, hvp := poisoned(t, runtime.BF16, P, K, d), poisoned(t, runtime.BF16, P, K, d)
			if err := gb.RoPEStoreKVAt(nil, hk, hv, hkp, hvp, positions, slots, inv); err != nil {
				t.Fatalf("q left out: %v", err)
			}
			hq := gpu(t, runtime.BF16, q, T, H, d)
			if err := gb.RoPEStoreKVAt(hq, nil, nil, nil, nil, positions, nil, inv); err != nil {
				t.Fatalf("k, v and the pools left out: %v", err)
			}
			for _, c := range []struct {
				n         string
				got, want *runtime.Tensor
			}{{"k", hk, wk}, {"v", hv, wv}, {"k pool", hkp, wkp}, {"v pool", hvp, wvp}, {"q", hq, wq}} {
				g, w := read(t, c.got), read(t, c.want)
				for i := range w {
					if math.Float32bits(g[i]) != math.Float32bits(w[i]) {
						t.Fatalf("%s element %d: %v, the whole call's %v", c.n, i, g[i], w[i])
					}
				}
			}
			if slices.Equal(read(t, hq), q) {
				t.Errorf("q alone was not rotated")
			}
		})
	}
}

// TestSampleRows: the device's temperature draws equal the float64 host
// reference (kernels.SampleRowReference) except where the draw lands within
// float32 rounding of a boundary between two tokens' mass; rows with a NaN,
// +Inf or only −Inf give −1.
func TestSampleRows(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	const R, V = 64, 128256
	x := randBF16(rng, R*V, 8)
	x[3*V+17] = float32(math.NaN())
	x[5*V+2] = float32(math.Inf(1))
	for i := 7 * V; i < 8*V; i++ {
		x[i] = float32(math.Inf(-1))
	}
	invT, u := make([]float32, R), make([]float32, R)
	for r := range R {
		invT[r] = float32(0.3 + 2*rng.Float64())
		u[r] = float32(rng.Float64())
	}
	u[9] = 0 // the first token with mass
	u[10] = math.Nextafter32(1, 0)
	for _, dt := range []runtime.DType{runtime.BF16, runtime.F32} {
		got := make([]int32, R)
		xt := gpu(t, dt, x, R, V)
		if err := gb.SampleRows(got, xt, invT, u); err != nil {
			t.Fatal(err)
		}
		mismatches := 0
		for r := range R {
			row := x[r*V : (r+1)*V]
			if dt == runtime.BF16 {
				row = roundBF16(row)
			}
			want := kernels.SampleRowReference(row, invT[r], u[r])
			if int(got[r]) == want {
				continue
			}
			if want < 0 || got[r] < 0 || !nearBoundary(row, invT[r], u[r], int(got[r]), want) {
				t.Errorf("%v row %d: drew %d, want %d", dt, r, got[r], want)
			}
			mismatches++
		}
		if mismatches > 2 {
			t.Errorf("%v: %d of %d rows differ from the reference at rounding boundaries; want at most 2", dt, mismatches, R)
		}
	}
	if err := gb.SampleRows(make([]int32, R), gpu(t, runtime.F32, x, R, V), invT[:1], u); err == nil {
		t.Error("one temperature for 64 rows: no error")
	}
}

// nearBoundary reports whether u·total falls within 1e-5·total of the mass
// before token a or b (a float32 sum may then pick its neighbour).
func nearBoundary(row []float32, invT, u float32, a, b int) bool {
	mx := float32(math.Inf(-1))
	for _, v := range row {
		mx = max(mx, v)
	}
	cum := make([]float64, len(row)+1)
	for i, v := range row {
		cum[i+1] = cum[i] + math.Exp(float64(v-mx)*float64(invT))
	}
	total := cum[len(row)]
	target := float64(u) * total
	lo, hi := min(a, b), max(a, b)
	for i := lo; i <= hi+1 && i < len(cum); i++ {
		if math.Abs(cum[i]-target) <= 1e-5*total {
			return true
		}
	}
	return false
}

// roundBF16 is row as a BF16 tensor holds it.
func roundBF16(row []float32) []float32 {
	out := make([]float32, len(row))
	for i, v := range row {
		out[i] = runtime.BF16ToF32(runtime.F32ToBF16(v))
	}
	return out
}
