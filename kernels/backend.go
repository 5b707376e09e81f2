package kernels

import (
	"errors"
	"fmt"

	"github.com/flextensor-go/flextensor/runtime"
)

// Backend runs the model's ops on one device's tensors. Activations are in
// ActDType; weights in their stored dtype. All tensors are contiguous. Shapes
// use: T tokens, D model width, H query heads, K key/value heads, d head
// width, N output features, C cache capacity.
type Backend interface {
	// Device is the device the tensors live on.
	Device() runtime.Device
	// ActDType is the activations' dtype (F32 on the CPU, BF16 on a GPU).
	ActDType() runtime.DType
	// MatMul: out[T,N] = x[T,D]·w[N,D]ᵀ with F32 accumulation.
	MatMul(out, x, w *runtime.Tensor) error
	// RMSNorm: out[t,:] = x[t,:] / sqrt(mean(x[t,:]²) + eps) · w.
	RMSNorm(out, x, w *runtime.Tensor, eps float32) error
	// Embedding: out[t,:] = table[ids[t],:].
	Embedding(out, table *runtime.Tensor, ids []int32) error
	// RoPE rotates x[T,H,d] in place; token t sits at position pos0+t.
	RoPE(x *runtime.Tensor, pos0 int, invFreq []float32) error
	// StoreKV writes x[T,K,d] into cache[C,K,d] at rows pos0..pos0+T-1.
	StoreKV(cache, x *runtime.Tensor, pos0 int) error
	// Attention: causal GQA of q[T,H,d] (positions pos0..) over the caches'
	// rows 0..pos0+T-1, written to out[T,H,d].
	Attention(out, q, kCache, vCache *runtime.Tensor, pos0 int) error
	// SiLUMul: out = silu(gate)·up elementwise.
	SiLUMul(out, gate, up *runtime.Tensor) error
	// Add: out = a + b elementwise.
	Add(out, a, b *runtime.Tensor) error
	// ReadF32 copies src (any float dtype) to host float32 values, waiting for
	// the work that produces it.
	ReadF32(dst []float32, src *runtime.Tensor) error
}

// CPUBackend runs the kernels of this package on CPU-device tensors.
type CPUBackend struct {
	dev runtime.Device
	// FP8Activations makes MatMulFP8 quantize each row of x to E4M3 with
	// its own scale (max|row|/448) before multiplying: the numerics of an
	// FP8 tensor-core GEMM with activations quantized per token (W8A8),
	// for measuring what that path would cost in accuracy. Off: W8A16.
	FP8Activations bool
}

// NewCPUBackend returns the CPU backend for dev (a CPU device).
func NewCPUBackend(dev runtime.Device) (*CPUBackend, error) {
	if dev == nil {
		return nil, errors.New("kernels.NewCPUBackend: nil device (want a cpu device)")
	}
	if dev.Kind() != runtime.KindCPU {
		return nil, fmt.Errorf("kernels: the CPU backend needs a cpu device, got %s", dev.Name())
	}
	return &CPUBackend{dev: dev}, nil
}

// Device is the CPU device.
func (b *CPUBackend) Device() runtime.Device { return b.dev }

// ActDType is F32.
func (b *CPUBackend) ActDType() runtime.DType { return runtime.F32 }

// AsMat views a CPU tensor of rank 1 or 2 as a Mat (rank 1 is one row).
// A nil t (an unbound weight) is an error.
func AsMat(t *runtime.Tensor) (Mat, error) {
	if t == nil {
		return Mat{}, errors.New("kernels: the weight is nil (not bound)")
	}
	s := t.Shape()
	rows, cols := 1, 0
	switch len(s) {
	case 1:
		cols = s[0]
	case 2:
		rows, cols = s[0], s[1]
	default:
		return Mat{}, fmt.Errorf("kernels: weight of shape %v: want rank 1 or 2", s)
	}
	m := Mat{DType: t.DType(), Rows: rows, Cols: cols}
	switch t.DType() {
	case runtime.F32:
		m.F32 = t.F32()
	case runtime.BF16, runtime.F16:
		m.Half = t.U16()
	default:
		return Mat{}, fmt.Errorf("kernels: weight dtype %v is not supported (want F32, BF16 or F16)", t.DType())
	}
	if t.Bytes() == nil && t.NumElements() > 0 {
		return Mat{}, fmt.Errorf("kernels: weight %v is not in host-addressable memory", t)
	}
	return m, nil
}

// f32 is the host values of an F32 activation tensor; name says which
// argument it is in errors (a nil t is one).
func f32(name string, t *runtime.Tensor) ([]float32, error) {
	if t == nil {
		return nil, fmt.Errorf("kernels: %s is nil", name)
	}
	if t.DType() != runtime.F32 {
		return nil, fmt.Errorf("kernels: %s is %v, the CPU backend wants F32 activations", name, t.DType())
	}
	v := t.F32()
	if v == nil && t.NumElements() > 0 {
		return nil, fmt.Errorf("kernels: %s (%v) is not in host-addressable memory", name, t)
	}
	return v, nil
}

// MatMul: out[T,N] = x[T,D]·w[N,D]ᵀ.
func (b *CPUBackend) MatMul(out, x, w *runtime.Tensor) error {
	wm, err := AsMat(w)
	if err != nil {
		return err
	}
	xv, err := f32("MatMul x", x)
	if err != nil {
		return err
	}
	ov, err := f32("MatMul out", out)
	if err != nil {
		return err
	}
	if wm.Cols == 0 || x.NumElements()%wm.Cols != 0 {
		return fmt.Errorf("kernels.MatMul: x %v does not have rows of w's %d columns (w %v)", x.Shape(), wm.Cols, w.Shape())
	}
	m := x.NumElements() / wm.Cols
	if out.NumElements() != m*wm.Rows {
		return fmt.Errorf("kernels.MatMul: out %v, want %d×%d", out.Shape(), m, wm.Rows)
	}
	return MatMul(ov, xv, m, wm)
}

// RMSNorm normalises each row of x.
func (b *CPUBackend) RMSNorm(out, x, w *runtime.Tensor, eps float32) error {
	wm, err := AsMat(w)
	if err != nil {
		return err
	}
	xv, err := f32("RMSNorm x", x)
	if err != nil {
		return err
	}
	ov, err := f32("RMSNorm out", out)
	if err != nil {
		return err
	}
	dim := x.Dim(-1)
	if wm.Rows*wm.Cols != dim || len(ov) != len(xv) {
		return fmt.Errorf("kernels.RMSNorm: x %v, w %v, out %v disagree", x.Shape(), w.Shape(), out.Shape())
	}
	return RMSNorm(ov, xv, len(xv)/dim, wm, eps)
}

// Embedding gathers rows of table.
func (b *CPUBackend) Embedding(out, table *runtime.Tensor, ids []int32) error {
	tm, err := AsMat(table)
	if err != nil {
		return err
	}
	ov, err := f32("Embedding out", out)
	if err != nil {
		return err
	}
	return Embedding(ov, tm, ids)
}

// RoPE rotates x in place.
func (b *CPUBackend) RoPE(x *runtime.Tensor, pos0 int, invFreq []float32) error {
	xv, err := f32("RoPE x", x)
	if err != nil {
		return err
	}
	s := x.Shape()
	if len(s) != 3 {
		return fmt.Errorf("kernels.RoPE: x %v, want [T,H,d]", s)
	}
	return ApplyRoPE(xv, s[0], s[1], s[2], pos0, invFreq)
}

// StoreKV writes x into cache rows pos0...
func (b *CPUBackend) StoreKV(cache, x *runtime.Tensor, pos0 int) error {
	cv, err := f32("StoreKV cache", cache)
	if err != nil {
		return err
	}
	xv, err := f32("StoreKV x", x)
	if err != nil {
		return err
	}
	row := cache.NumElements() / cache.Dim(0)
	if len(xv)%row != 0 || pos0 < 0 || pos0*row+len(xv) > len(cv) {
		return fmt.Errorf("kernels.StoreKV: %v at position %d does not fit cache %v", x.Shape(), pos0, cache.Shape())
	}
	copy(cv[pos0*row:], xv)
	return nil
}

// Attention runs causal GQA over the caches.
func (b *CPUBackend) Attention(out, q, kCache, vCache *runtime.Tensor, pos0 int) error {
	return b.AttentionWindow(out, q, kCache, vCache, pos0, 0)
}

// AttentionWindow is Attention where each query sees only the last window
// positions (itself included); 0 means all (kernels.WindowAttender).
func (b *CPUBackend) AttentionWindow(out, q, kCache, vCache *runtime.Tensor, pos0, window int) error {
	ov, err := f32("Attention out", out)
	if err != nil {
		return err
	}
	qv, err := f32("Attention q", q)
	if err != nil {
		return err
	}
	kv, err := f32("Attention k cache", kCache)
	if err != nil {
		return err
	}
	vv, err := f32("Attention v cache", vCache)
	if err != nil {
		return err
	}
	qs, cs := q.Shape(), kCache.Shape()
	if len(qs) != 3 || len(cs) != 3 || !cs.Equal(vCache.Shape()) || qs[2] != cs[2] {
		return fmt.Errorf("kernels.Attention: q %v, caches %v / %v: want [T,H,d] and [C,K,d]", qs, cs, vCache.Shape())
	}
	if pos0+qs[0] > cs[0] {
		return fmt.Errorf("kernels.Attention: positions up to %d exceed cache capacity %d", pos0+qs[0], cs[0])
	}
	return AttentionWindow(ov, qv, kv, vv, qs[0], pos0, qs[1], cs[1], qs[2], window, nil)
}

// SiLUMul: out = silu(gate)·up.
func (b *CPUBackend) SiLUMul(out, gate, up *runtime.Tensor) error {
	ov, err := f32("SiLUMul out", out)
	if err != nil {
		return err
	}
	gv, err := f32("SiLUMul gate", gate)
	if err != nil {
		return err
	}
	uv, err := f32("SiLUMul up", up)
	if err != nil {
		return err
	}
	if len(ov) != len(gv) || len(gv) != len(uv) {
		return fmt.Errorf("kernels.SiLUMul: sizes %d, %d, %d differ", len(ov), len(gv), len(uv))
	}
	SiLUMul(ov, gv, uv)
	return nil
}

// Add: out = a + b.
func (b *CPUBackend) Add(out, x, y *runtime.Tensor) error {
	ov, err := f32("Add out", out)
	if err != nil {
		return err
	}
	xv, err := f32("Add a", x)
	if err != nil {
		return err
	}
	yv, err := f32("Add b", y)
	if err != nil {
		return err
	}
	if len(ov) != len(xv) || len(xv) != len(yv) {
		return fmt.Errorf("kernels.Add: sizes %d, %d, %d differ", len(ov), len(xv), len(yv))
	}
	Add(ov, xv, yv)
	return nil
}

// ReadF32 copies src to dst, widening BF16/F16.
func (b *CPUBackend) ReadF32(dst []float32, src *runtime.Tensor) error {
	if src == nil {
		return errors.New("kernels.ReadF32: src is nil")
	}
	if len(dst) != src.NumElements() {
		return fmt.Errorf("kernels.ReadF32: dst holds %d values, src %v has %d", len(dst), src.Shape(), src.NumElements())
	}
	switch src.DType() {
	case runtime.F32:
		copy(dst, src.F32())
	case runtime.BF16:
		BF16ToF32(dst, src.U16())
	case runtime.F16:
		F16ToF32(dst, src.U16())
	default:
		return fmt.Errorf("kernels.ReadF32: dtype %v", src.DType())
	}
	return nil
}
