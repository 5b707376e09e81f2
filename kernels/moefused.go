package kernels

import (
	"errors"
	"fmt"
	"slices"

	"github.com/flextensor-go/flextensor/runtime"
)

// MoEFused runs a mixture-of-experts block for a few tokens (a decode step,
// a small batch) with no host round trip, so the block can be captured in a
// graph: the routing stays on the device, and the experts' weights are read
// through a device table indexed by the routed expert ids. An optional
// capability, found by type assertion. With T tokens, each routed to K of
// E experts of inner width I and hidden size D:
//
//	MoERoute:  ids[T,K], weights[T,K] from the router logits[T,E]
//	MoEGateUp: act[t,j,:] = silu(x[t]·Wg_eᵀ)·(x[t]·Wu_eᵀ), e = ids[t,j]
//	MoEDown:   out[t,:]   = Σ_j weights[t,j]·(act[t,j,:]·Wd_eᵀ)
type MoEFused interface {
	// NewExpertTable makes a table for E experts' weights (empty until Set).
	NewExpertTable(experts int) (ExpertTable, error)
	// MoERoute routes each row of logits [T,E] (F32) exactly as
	// Routing.Route does: the same experts in the same order into ids
	// [T,K] (I32) and, in F32, the same weights into weights [T,K] (F32),
	// renormalised when renorm; K is ids' last dimension.
	MoERoute(ids, weights, logits *runtime.Tensor, renorm bool) error
	// MoEGateUp: act[T·K, I] (activation dtype) from x[T,D] and the routed
	// ids [T,K] through tab's gate and up weights.
	MoEGateUp(act, x, ids *runtime.Tensor, tab ExpertTable) error
	// MoEDown: out[T,D] (F32) = Σ_j weights[t,j]·(act[t·K+j,:]·Wd_eᵀ),
	// accumulated in F32 in j order, written once (not added to out).
	MoEDown(out, act, ids, weights *runtime.Tensor, tab ExpertTable) error
}

// ExpertTable is a backend's table of E experts' gate, up and down
// weights (a device array of pointers on a GPU), which MoEFused's ops index
// by expert id. It holds no weights, only where they are: Set again after
// any weight moves.
type ExpertTable interface {
	// Set points the table at gate[e], up[e] ([I,D]) and down[e] ([D,I])
	// for e < E. Weights the backend's fused ops cannot take (dtype,
	// alignment, widths) give an error wrapping ErrNotFusable; the table
	// then must not be used until a Set succeeds.
	Set(gate, up, down []*runtime.Tensor) error
	// Close frees the table.
	Close() error
}

// ErrNotFusable says that a backend's fused expert ops cannot take these
// weights; the caller runs the experts one by one instead.
var ErrNotFusable = errors.New("the fused expert ops cannot take these weights")

// MoEFusedOf returns b's MoEFused, or false.
func MoEFusedOf(b Backend) (MoEFused, bool) {
	f, ok := b.(MoEFused)
	return f, ok
}

// CheckExperts validates E experts' weights for an ExpertTable: E entries
// each, none nil, every gate and up [I,D], every down [D,I], one dtype. It
// returns I and D.
func CheckExperts(E int, gate, up, down []*runtime.Tensor) (I, D int, err error) {
	if len(gate) != E || len(up) != E || len(down) != E {
		return 0, 0, fmt.Errorf("kernels: expert table of %d experts given %d gate, %d up and %d down weights", E, len(gate), len(up), len(down))
	}
	if E == 0 {
		return 0, 0, errors.New("kernels: an expert table needs at least one expert")
	}
	for e := 0; e < E; e++ {
		for _, w := range []struct {
			name string
			t    *runtime.Tensor
		}{{"gate", gate[e]}, {"up", up[e]}, {"down", down[e]}} {
			if w.t == nil {
				return 0, 0, fmt.Errorf("kernels: expert %d's %s weight is nil", e, w.name)
			}
			if len(w.t.Shape()) != 2 {
				return 0, 0, fmt.Errorf("kernels: expert %d's %s weight %v is not a matrix", e, w.name, w.t.Shape())
			}
		}
		if e == 0 {
			I, D = gate[0].Dim(0), gate[0].Dim(1)
		}
		if gate[e].Dim(0) != I || gate[e].Dim(1) != D || up[e].Dim(0) != I || up[e].Dim(1) != D || down[e].Dim(0) != D || down[e].Dim(1) != I {
			return 0, 0, fmt.Errorf("kernels: expert %d's weights gate %v, up %v, down %v: want [%d,%d], [%d,%d], [%d,%d]",
				e, gate[e].Shape(), up[e].Shape(), down[e].Shape(), I, D, I, D, D, I)
		}
		dt := gate[0].DType()
		if gate[e].DType() != dt || up[e].DType() != dt || down[e].DType() != dt {
			return 0, 0, fmt.Errorf("%w: expert %d's weights are %v, %v, %v, not all %v", ErrNotFusable, e, gate[e].DType(), up[e].DType(), down[e].DType(), dt)
		}
	}
	if I == 0 || D == 0 {
		return 0, 0, fmt.Errorf("kernels: expert weights of %d×%d are empty", I, D)
	}
	return I, D, nil
}

// CheckMoERoute validates MoERoute's tensors: logits [T,E] F32, ids [T,K]
// I32 and weights [T,K] F32 with 1 ≤ K ≤ E. It returns T, E and K.
func CheckMoERoute(ids, weights, logits *runtime.Tensor) (T, E, K int, err error) {
	for _, c := range []struct {
		name string
		t    *runtime.Tensor
		dt   runtime.DType
	}{{"ids", ids, runtime.I32}, {"weights", weights, runtime.F32}, {"logits", logits, runtime.F32}} {
		if c.t == nil {
			return 0, 0, 0, fmt.Errorf("kernels.MoERoute: %s is nil", c.name)
		}
		if c.t.DType() != c.dt {
			return 0, 0, 0, fmt.Errorf("kernels.MoERoute: %s is %v, want %v", c.name, c.t.DType(), c.dt)
		}
		if len(c.t.Shape()) == 0 || c.t.Dim(-1) == 0 {
			return 0, 0, 0, fmt.Errorf("kernels.MoERoute: %s %v has no rows", c.name, c.t.Shape())
		}
	}
	E, K = logits.Dim(-1), ids.Dim(-1)
	T = logits.NumElements() / E
	switch {
	case K > E:
		return 0, 0, 0, fmt.Errorf("kernels.MoERoute: top %d of %d experts", K, E)
	case ids.NumElements() != T*K || !ids.Shape().Equal(weights.Shape()):
		return 0, 0, 0, fmt.Errorf("kernels.MoERoute: ids %v and weights %v for logits %v: want [%d,%d] each", ids.Shape(), weights.Shape(), logits.Shape(), T, K)
	}
	return T, E, K, nil
}

// CheckMoEGateUp validates MoEGateUp's tensors against a table of
// experts of inner width I and hidden size D: x [T,D], ids [T,K] (I32),
// act [T·K, I]. It returns T and K.
func CheckMoEGateUp(act, x, ids *runtime.Tensor, I, D int) (T, K int, err error) {
	if act == nil || x == nil || ids == nil {
		return 0, 0, errors.New("kernels.MoEGateUp: a nil tensor")
	}
	if ids.DType() != runtime.I32 || len(ids.Shape()) == 0 || ids.Dim(-1) == 0 {
		return 0, 0, fmt.Errorf("kernels.MoEGateUp: ids %v %v, want I32 [T,K]", ids.DType(), ids.Shape())
	}
	K = ids.Dim(-1)
	T = ids.NumElements() / K
	if x.NumElements() != T*D || len(x.Shape()) == 0 || x.Dim(-1) != D {
		return 0, 0, fmt.Errorf("kernels.MoEGateUp: x %v for %d tokens of the experts' width %d", x.Shape(), T, D)
	}
	if act.NumElements() != T*K*I || act.Dim(-1) != I {
		return 0, 0, fmt.Errorf("kernels.MoEGateUp: act %v, want [%d,%d] (%d tokens × %d experts, inner width %d)", act.Shape(), T*K, I, T, K, I)
	}
	return T, K, nil
}

// CheckMoEDown validates MoEDown's tensors: out [T,D] F32, act [T·K, I],
// ids [T,K] I32 and weights [T,K] F32. It returns T and K.
func CheckMoEDown(out, act, ids, weights *runtime.Tensor, I, D int) (T, K int, err error) {
	if out == nil || act == nil || ids == nil || weights == nil {
		return 0, 0, errors.New("kernels.MoEDown: a nil tensor")
	}
	if ids.DType() != runtime.I32 || len(ids.Shape()) == 0 || ids.Dim(-1) == 0 {
		return 0, 0, fmt.Errorf("kernels.MoEDown: ids %v %v, want I32 [T,K]", ids.DType(), ids.Shape())
	}
	K = ids.Dim(-1)
	T = ids.NumElements() / K
	switch {
	case weights.DType() != runtime.F32 || !weights.Shape().Equal(ids.Shape()):
		return 0, 0, fmt.Errorf("kernels.MoEDown: weights %v %v, want F32 %v", weights.DType(), weights.Shape(), ids.Shape())
	case out.DType() != runtime.F32 || out.NumElements() != T*D || out.Dim(-1) != D:
		return 0, 0, fmt.Errorf("kernels.MoEDown: out %v %v, want F32 [%d,%d]", out.DType(), out.Shape(), T, D)
	case act.NumElements() != T*K*I || act.Dim(-1) != I:
		return 0, 0, fmt.Errorf("kernels.MoEDown: act %v, want [%d,%d]", act.Shape(), T*K, I)
	}
	return T, K, nil
}

// cpuExpertTable is the CPU backend's ExpertTable: the experts' weights as
// Mats over their host memory.
type cpuExpertTable struct {
	E, I, D        int
	gate, up, down []Mat
	set            bool
}

var _ MoEFused = (*CPUBackend)(nil)

// NewExpertTable makes an empty table for E experts (MoEFused).
func (b *CPUBackend) NewExpertTable(E int) (ExpertTable, error) {
	if E <= 0 {
		return nil, fmt.Errorf("kernels.NewExpertTable: %d experts", E)
	}
	return &cpuExpertTable{E: E}, nil
}

// Set points the table at the experts' weights (F32, BF16 or F16).
func (t *cpuExpertTable) Set(gate, up, down []*runtime.Tensor) error {
	t.set = false
	I, D, err := CheckExperts(t.E, gate, up, down)
	if err != nil {
		return err
	}
	mats := func(ws []*runtime.Tensor) ([]Mat, error) {
		out := make([]Mat, len(ws))
		for e, w := range ws {
			m, err := AsMat(w)
			if err != nil {
				return nil, fmt.Errorf("%w: expert %d: %v", ErrNotFusable, e, err)
			}
			out[e] = m
		}
		return out, nil
	}
	if t.gate, err = mats(gate); err != nil {
		return err
	}
	if t.up, err = mats(up); err != nil {
		return err
	}
	if t.down, err = mats(down); err != nil {
		return err
	}
	t.I, t.D, t.set = I, D, true
	return nil
}

// Close drops the table's references.
func (t *cpuExpertTable) Close() error {
	*t = cpuExpertTable{E: t.E}
	return nil
}

// cpuTable checks that tab is a CPU table that was Set.
func cpuTable(op string, tab ExpertTable) (*cpuExpertTable, error) {
	t, ok := tab.(*cpuExpertTable)
	if !ok {
		return nil, fmt.Errorf("kernels.%s: expert table %T is not the CPU backend's", op, tab)
	}
	if !t.set {
		return nil, fmt.Errorf("kernels.%s: the expert table was not set", op)
	}
	return t, nil
}

// expertIDs checks that every id indexes one of E experts.
func expertIDs(op string, ids []int32, E int) error {
	for i, e := range ids {
		if e < 0 || int(e) >= E {
			return fmt.Errorf("kernels.%s: expert id %d at %d is outside 0..%d", op, e, i, E-1)
		}
	}
	return nil
}

// MoERoute routes each row of logits exactly as Routing.Route (MoEFused).
func (b *CPUBackend) MoERoute(ids, weights, logits *runtime.Tensor, renorm bool) error {
	_, E, K, err := CheckMoERoute(ids, weights, logits)
	if err != nil {
		return err
	}
	lv, err := f32("MoERoute logits", logits)
	if err != nil {
		return err
	}
	var r Routing
	if err := r.Route(lv, E, K, renorm); err != nil {
		return err
	}
	copy(ids.I32(), r.Experts)
	copy(weights.F32(), r.Weights)
	return nil
}

// MoEGateUp: act[t·K+j,:] = silu(x[t]·Wg_eᵀ)·(x[t]·Wu_eᵀ), e = ids[t,j]
// (MoEFused), the same products as MatMul and SiLUMul.
func (b *CPUBackend) MoEGateUp(act, x, ids *runtime.Tensor, tab ExpertTable) error {
	t, err := cpuTable("MoEGateUp", tab)
	if err != nil {
		return err
	}
	T, K, err := CheckMoEGateUp(act, x, ids, t.I, t.D)
	if err != nil {
		return err
	}
	xv, err := f32("MoEGateUp x", x)
	if err != nil {
		return err
	}
	av, err := f32("MoEGateUp act", act)
	if err != nil {
		return err
	}
	iv := ids.I32()
	if err := expertIDs("MoEGateUp", iv, t.E); err != nil {
		return err
	}
	I, D := t.I, t.D
	u := make([]float32, I)
	for tok := 0; tok < T; tok++ {
		xt := xv[tok*D : (tok+1)*D]
		for j := 0; j < K; j++ {
			e := iv[tok*K+j]
			g := av[(tok*K+j)*I : (tok*K+j+1)*I]
			if err := MatMul(g, xt, 1, t.gate[e]); err != nil {
				return err
			}
			if err := MatMul(u, xt, 1, t.up[e]); err != nil {
				return err
			}
			SiLUMul(g, g, u)
		}
	}
	return nil
}

// MoEDown: out[t,:] = Σ_j weights[t,j]·(act[t·K+j,:]·Wd_eᵀ) (MoEFused),
// summed in ascending expert order, as MoEKernels.ScatterAddRows adds the
// experts of the per-expert path.
func (b *CPUBackend) MoEDown(out, act, ids, weights *runtime.Tensor, tab ExpertTable) error {
	t, err := cpuTable("MoEDown", tab)
	if err != nil {
		return err
	}
	T, K, err := CheckMoEDown(out, act, ids, weights, t.I, t.D)
	if err != nil {
		return err
	}
	av, err := f32("MoEDown act", act)
	if err != nil {
		return err
	}
	ov := out.F32()
	wv := weights.F32()
	iv := ids.I32()
	if err := expertIDs("MoEDown", iv, t.E); err != nil {
		return err
	}
	I, D := t.I, t.D
	y := make([]float32, D)
	order := make([]int, K)
	clear(ov[:T*D])
	for tok := 0; tok < T; tok++ {
		o := ov[tok*D : (tok+1)*D]
		// In ascending expert order, as the per-expert path adds them: the
		// two paths then agree bit for bit.
		for j := range order {
			order[j] = j
		}
		slices.SortFunc(order, func(a, b int) int { return int(iv[tok*K+a]) - int(iv[tok*K+b]) })
		for _, j := range order {
			s := tok*K + j
			if err := MatMul(y, av[s*I:(s+1)*I], 1, t.down[iv[s]]); err != nil {
				return err
			}
			w := wv[s]
			for c, v := range y {
				o[c] += w * v
			}
		}
	}
	return nil
}
