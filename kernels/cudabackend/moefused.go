//go:build cuda

package cudabackend

import (
	"fmt"
	"slices"
	"unsafe"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

var _ kernels.MoEFused = (*Backend)(nil)

// moeFusedKernels are the fused mixture-of-experts kernels (moefused.cu).
type moeFusedKernels struct {
	route, gateUp, down *cuda.Function
}

// loadMoEFused looks the fused MoE kernels up in the compiled module.
func loadMoEFused(get func(string) *cuda.Function) moeFusedKernels {
	return moeFusedKernels{route: get("moe_route_f32"), gateUp: get("moe_gateup_bf16"), down: get("moe_down_f32out")}
}

// expertTable is the CUDA ExpertTable: 3E device pointers (gate, up, down
// of each expert), rewritten in stream order when the weights move, or,
// while the compute stream is being captured, uploaded synchronously into
// a fresh buffer (the old one is retired: earlier graphs may read it).
type expertTable struct {
	b       *Backend
	E, I, D int
	ptrs    []uint64 // what dev holds
	set     bool
	dev     *runtime.DeviceBuffer
	stage   *runtime.HostBuffer
	ev      *cuda.Event // completes when the last copy from stage has run
}

// NewExpertTable makes an empty table for E experts (kernels.MoEFused).
func (b *Backend) NewExpertTable(E int) (kernels.ExpertTable, error) {
	if E <= 0 {
		return nil, fmt.Errorf("cudabackend.NewExpertTable: %d experts", E)
	}
	return &expertTable{b: b, E: E}, nil
}

// Set points the table at the experts' weights: BF16 on this GPU, rows of a
// multiple of 8 values, 16-byte aligned; others are kernels.ErrNotFusable.
func (t *expertTable) Set(gate, up, down []*runtime.Tensor) error {
	t.set = false
	I, D, err := kernels.CheckExperts(t.E, gate, up, down)
	if err != nil {
		return err
	}
	b := t.b
	if I%8 != 0 || D%8 != 0 {
		return fmt.Errorf("cudabackend: %w: experts of %d×%d (want widths that are multiples of 8)", kernels.ErrNotFusable, I, D)
	}
	ptrs := make([]uint64, 0, 3*t.E)
	for _, ws := range [][]*runtime.Tensor{gate, up, down} {
		for e, w := range ws {
			if w.Device() != runtime.Device(b.dev) || w.DType() != runtime.BF16 || !aligned16(w.Ptr()) {
				return fmt.Errorf("cudabackend: %w: expert %d's weight %v (want BF16 on %s, 16-byte aligned)", kernels.ErrNotFusable, e, w, b.dev.Name())
			}
			ptrs = append(ptrs, uint64(w.Ptr()))
		}
	}
	if t.dev != nil && slices.Equal(t.ptrs, ptrs) {
		t.I, t.D, t.set = I, D, true
		return nil
	}
	n := int64(8 * len(ptrs))
	src := unsafe.Slice((*byte)(unsafe.Pointer(&ptrs[0])), n)
	if b.capturing {
		buf, err := b.dev.Alloc(n, "expert weight table")
		if err != nil {
			return err
		}
		if err := b.aux.Upload(buf.Ptr(), src); err != nil {
			buf.Free()
			return err
		}
		if t.dev != nil {
			b.retired = append(b.retired, t.dev)
		}
		t.dev = buf
	} else {
		if t.ev != nil {
			if err := t.ev.Synchronize(); err != nil { // the last copy out of stage has run
				return err
			}
		}
		if t.stage == nil {
			st, err := b.dev.AllocHost(n, "expert weight table staging")
			if err != nil {
				return err
			}
			t.stage = st
		}
		if t.dev == nil {
			buf, err := b.dev.Alloc(n, "expert weight table")
			if err != nil {
				return err
			}
			t.dev = buf
		}
		copy(t.stage.Bytes(), src)
		if err := b.s.CopyH2D(t.dev, 0, t.stage, 0, n); err != nil {
			return err
		}
		ev, err := b.s.RecordEvent()
		if err != nil {
			return err
		}
		t.ev = ev
	}
	t.ptrs, t.I, t.D, t.set = ptrs, I, D, true
	return nil
}

// Close retires the table's device memory (a graph may still name it; the
// backend frees it at its Close) and frees its staging.
func (t *expertTable) Close() error {
	var err error
	if t.ev != nil {
		err = t.ev.Synchronize()
	}
	if t.dev != nil {
		t.b.retired = append(t.b.retired, t.dev)
	}
	t.stage.Free()
	t.dev, t.stage, t.ev, t.ptrs, t.set = nil, nil, nil, nil, false
	return err
}

// table checks that tab is this backend's table and was set.
func (b *Backend) table(op string, tab kernels.ExpertTable) (*expertTable, error) {
	t, ok := tab.(*expertTable)
	if !ok || t.b != b {
		return nil, fmt.Errorf("cudabackend.%s: expert table %T is not this backend's", op, tab)
	}
	if !t.set {
		return nil, fmt.Errorf("cudabackend.%s: the expert table was not set", op)
	}
	return t, nil
}

// MoERoute routes each row of logits [T,E] into ids and weights [T,K] on
// the device, as kernels.Routing.Route does (kernels.MoEFused).
func (b *Backend) MoERoute(ids, weights, logits *runtime.Tensor, renorm bool) error {
	T, E, K, err := kernels.CheckMoERoute(ids, weights, logits)
	if err != nil {
		return err
	}
	for _, x := range []struct {
		name string
		t    *runtime.Tensor
	}{{"ids", ids}, {"weights", weights}, {"logits", logits}} {
		if err := b.onDevice("MoERoute", x.name, x.t); err != nil {
			return err
		}
	}
	smem := (5*E + 3) / 4 * 4
	if smem > 48<<10 {
		return fmt.Errorf("cudabackend.MoERoute: %d experts are more than one block's shared memory holds (%d)", E, 48<<10/5)
	}
	r := 0
	if renorm {
		r = 1
	}
	return b.k.moeFused.route.LaunchBytes(b.s, int64(T)*int64(4*E+8*K), cuda.Dim3{X: T}, cuda.Dim3{X: 32}, smem,
		cuda.Ptr(ids.Ptr()), cuda.Ptr(weights.Ptr()), cuda.Ptr(logits.Ptr()), cuda.I32(E), cuda.I32(K), cuda.I32(r))
}

// MoEGateUp: act[t·K+j,:] = silu(x[t]·Wg_eᵀ)·(x[t]·Wu_eᵀ), e = ids[t,j], in
// one launch over every routed slot (kernels.MoEFused).
func (b *Backend) MoEGateUp(act, x, ids *runtime.Tensor, tab kernels.ExpertTable) error {
	t, err := b.table("MoEGateUp", tab)
	if err != nil {
		return err
	}
	T, K, err := kernels.CheckMoEGateUp(act, x, ids, t.I, t.D)
	if err != nil {
		return err
	}
	if err := b.act("MoEGateUp", "x", x); err != nil {
		return err
	}
	if err := b.act("MoEGateUp", "act", act); err != nil {
		return err
	}
	if err := b.onDevice("MoEGateUp", "ids", ids); err != nil {
		return err
	}
	if !aligned16(x.Ptr()) {
		return fmt.Errorf("cudabackend.MoEGateUp: x %v is not 16-byte aligned", x)
	}
	S := T * K
	if S == 0 {
		return nil
	}
	f := b.k.moeFused.gateUp
	bytes := int64(S)*int64(t.I)*int64(4*t.D+2) + int64(T)*int64(2*t.D)
	return f.LaunchBytes(b.s, bytes, cuda.Dim3{X: min(b.k.persistBlocks[f], (S*t.I+7)/8)}, cuda.Dim3{X: 256}, 0,
		cuda.Ptr(act.Ptr()), cuda.Ptr(x.Ptr()), cuda.Ptr(ids.Ptr()), cuda.Ptr(t.dev.Ptr()),
		cuda.I32(t.E), cuda.I32(S), cuda.I32(K), cuda.I32(t.I), cuda.I32(t.D))
}

// MoEDown: out[t,:] = Σ_j weights[t,j]·(act[t·K+j,:]·Wd_eᵀ), fp32, in one
// launch (kernels.MoEFused).
func (b *Backend) MoEDown(out, act, ids, weights *runtime.Tensor, tab kernels.ExpertTable) error {
	t, err := b.table("MoEDown", tab)
	if err != nil {
		return err
	}
	T, K, err := kernels.CheckMoEDown(out, act, ids, weights, t.I, t.D)
	if err != nil {
		return err
	}
	if err := b.act("MoEDown", "act", act); err != nil {
		return err
	}
	for _, x := range []struct {
		name string
		t    *runtime.Tensor
	}{{"out", out}, {"ids", ids}, {"weights", weights}} {
		if err := b.onDevice("MoEDown", x.name, x.t); err != nil {
			return err
		}
	}
	if !aligned16(act.Ptr()) {
		return fmt.Errorf("cudabackend.MoEDown: act %v is not 16-byte aligned", act)
	}
	if T == 0 {
		return nil
	}
	f := b.k.moeFused.down
	bytes := int64(T)*int64(K)*int64(t.I)*int64(2*t.D+2) + int64(T)*int64(4*t.D)
	return f.LaunchBytes(b.s, bytes, cuda.Dim3{X: min(b.k.persistBlocks[f], (T*t.D+7)/8)}, cuda.Dim3{X: 256}, 0,
		cuda.Ptr(out.Ptr()), cuda.Ptr(act.Ptr()), cuda.Ptr(ids.Ptr()), cuda.Ptr(weights.Ptr()), cuda.Ptr(t.dev.Ptr()),
		cuda.I32(t.E), cuda.I32(T), cuda.I32(K), cuda.I32(t.I), cuda.I32(t.D))
}
