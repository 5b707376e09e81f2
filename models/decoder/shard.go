package decoder

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/place"
	"github.com/flextensor-go/flextensor/runtime"
)

// Tensor parallelism: a model cut N ways, one shard per device, the shards
// running in lockstep and adding their partial results with a collective
// (runtime.Communicator: NCCL on GPUs, runtime.CPUGroup on CPU devices).
//
// Each shard is an ordinary Model of a narrower config (ShardPlan.Config):
// its attention holds whole KV-head groups (the query heads that read its
// key/value heads; key/value heads are replicated when there are more
// shards than KV heads) and its MLP a contiguous range of intermediate
// columns. q/k/v rows and their biases, o_proj's input columns, gate/up
// rows and down_proj's input columns are cut (TensorCut); norms, q/k
// norms, the embedding and the LM head are replicated. o_proj and
// down_proj then give partial sums of the full projection: Layer.ops
// all-reduces them (Model.allReduce) before the residual add. Neither has a
// bias in the families here; one would be added by rank 0 alone.
//
// Each shard is bound through package place from a Source that cuts the
// checkpoint's tensors (ShardSource), so an offload engine can run on each
// shard's tree under that device's budget: one plan per device, each
// streaming only its shard over its own link.
//
// Mixture-of-experts layers shard by experts instead: rank r of N holds
// experts [E·r/N, E·(r+1)/N) whole (ShardPlan.Experts; uneven ranges when N
// does not divide E, N ≤ E) under their checkpoint names, and the router
// replicated, so every rank computes the same routing. A rank runs only the
// routed experts it holds (the others contribute nothing), and the
// all-reduce after the feed-forward sums the experts' weighted outputs
// exactly as it sums down_proj's partial products. A rank's tree has no
// module for another rank's experts: it neither allocates nor binds them,
// announces only its own (nn.Announce), and an offload engine on it streams
// only its own. Dense layers of an MoE model (Qwen3-MoE mlp_only_layers)
// cut by intermediate columns as above. An expert block holding only some
// experts runs expert by expert, never through the fused ops (moefused.go).

// ShardPlan is one rank's part of a model cut Size ways: ranges of the full
// model's query heads, key/value heads and MLP intermediate columns.
type ShardPlan struct {
	Rank, Size int
	QHeads     [2]int // query heads [lo, hi)
	KVHeads    [2]int // key/value heads [lo, hi); shared with other ranks when Size > K (replicated)
	Inter      [2]int // MLP intermediate columns [lo, hi) (dense layers)
	Experts    [2]int // experts [lo, hi) of a mixture-of-experts model; zero for a dense one
}

// PlanShards cuts c over n devices: n must divide the query heads and the
// intermediate size (when some layer is dense), and either divide the
// key/value heads (each rank takes K/n of them with their query heads) or be
// a multiple of them (each KV head is replicated on n/K ranks, each taking
// part of its query heads). A mixture-of-experts model's E experts go
// E·r/n .. E·(r+1)/n to rank r, which needs n ≤ E.
func PlanShards(c *Config, n int) ([]ShardPlan, error) {
	if c == nil {
		return nil, errors.New("decoder.PlanShards: nil config")
	}
	H, K, I, E := c.NumAttentionHeads, c.NumKeyValueHeads, c.IntermediateSize, c.MoE.Experts
	dense := !c.MoE.Enabled()
	for i := 0; i < c.NumHiddenLayers && !dense; i++ {
		dense = !c.MoE.Sparse(i)
	}
	switch {
	case n < 1:
		return nil, fmt.Errorf("decoder.PlanShards: %d devices; want at least 1", n)
	case H%n != 0:
		return nil, fmt.Errorf("%d attention heads do not split evenly over %d devices (the device count must divide num_attention_heads)", H, n)
	case K%n != 0 && n%K != 0:
		return nil, fmt.Errorf("%d key/value heads do not split into whole groups over %d devices (the device count must divide num_key_value_heads %d or be a multiple of it)", K, n, K)
	case dense && I%n != 0:
		return nil, fmt.Errorf("intermediate size %d does not split evenly over %d devices", I, n)
	case c.MoE.Enabled() && n > E:
		return nil, fmt.Errorf("%d experts do not go round %d devices (sharding by experts needs at most one device per expert)", E, n)
	}
	q, group := H/n, H/K
	out := make([]ShardPlan, n)
	for r := range out {
		p := ShardPlan{Rank: r, Size: n, QHeads: [2]int{r * q, (r + 1) * q}, Inter: [2]int{r * I / n, (r + 1) * I / n}}
		if K%n == 0 {
			p.KVHeads = [2]int{r * K / n, (r + 1) * K / n}
		} else {
			g := r * q / group // every query head of the rank reads this KV head
			p.KVHeads = [2]int{g, g + 1}
		}
		if c.MoE.Enabled() {
			p.Experts = [2]int{r * E / n, (r + 1) * E / n}
		}
		out[r] = p
	}
	return out, nil
}

// Config is the shard's config: c with the shard's heads, intermediate
// size and experts (head_dim kept explicit).
func (p ShardPlan) Config(c *Config) Config {
	s := *c
	s.EOSTokenIDs = slices.Clone(c.EOSTokenIDs)
	s.NumAttentionHeads = p.QHeads[1] - p.QHeads[0]
	s.NumKeyValueHeads = p.KVHeads[1] - p.KVHeads[0]
	s.IntermediateSize = p.Inter[1] - p.Inter[0]
	s.MoE.DenseLayers = slices.Clone(c.MoE.DenseLayers)
	if c.MoE.Enabled() {
		s.MoE.Owned = p.Experts
	}
	return s
}

// NewShards builds the n shards of full (its config, names and rotary
// table; no weights bound) and their plans.
func NewShards(full *Model, n int) ([]*Model, []ShardPlan, error) {
	plans, err := PlanShards(&full.Cfg, n)
	if err != nil {
		return nil, nil, err
	}
	var out []*Model
	for _, p := range plans {
		c := p.Config(&full.Cfg)
		m, err := New(&c, full.Names)
		if err != nil {
			return nil, nil, fmt.Errorf("shard %d of %d: %w", p.Rank, n, err)
		}
		m.invFreq = slices.Clone(full.invFreq)
		out = append(out, m)
	}
	return out, plans, nil
}

// TensorCut is the block of a checkpoint tensor a shard holds: rows
// [Row0, Row1) and columns [Col0, Col1) of the tensor seen as a matrix (a
// 1-D tensor of n elements is n rows of one column).
type TensorCut struct{ Row0, Row1, Col0, Col1 int }

// ShardCuts is the cut of every tensor of shard m (a model NewShards made
// with plan p; full is the full model's config) that is not held whole. An
// expert block's router and experts are held whole (the shard's tree has
// only its own experts), so they have no cuts.
// FP8 scales are cut with their weights: per-channel scales by rows, block
// scales by blocks, which the cut must then align to.
func ShardCuts(m *Model, full *Config, p ShardPlan) (map[string]TensorCut, error) {
	cuts := map[string]TensorCut{}
	d := full.HeadDim
	rowsOf := func(l *nn.Linear, lo, hi, out, in int) error {
		cuts[l.Weight.Name()] = TensorCut{lo, hi, 0, in}
		if l.Bias != nil {
			cuts[l.Bias.Name()] = TensorCut{lo, hi, 0, 1}
		}
		if l.Scale != nil {
			sc, err := scaleCut(l, lo, hi, out, 0, in, in)
			if err != nil {
				return err
			}
			cuts[l.Scale.Name()] = sc
		}
		return nil
	}
	colsOf := func(l *nn.Linear, lo, hi, out, in int) error {
		if l.Bias != nil {
			return fmt.Errorf("%s has a bias: sharding a projection whose input is cut needs the bias added once; not implemented", l.Node().Name())
		}
		cuts[l.Weight.Name()] = TensorCut{0, out, lo, hi}
		if l.Scale != nil {
			sc, err := scaleCut(l, 0, out, out, lo, hi, in)
			if err != nil {
				return err
			}
			if l.FP8.Block > 0 {
				cuts[l.Scale.Name()] = sc
			} // per-channel scales: one per output row, all kept
		}
		return nil
	}
	D, H, K, I := full.HiddenSize, full.NumAttentionHeads, full.NumKeyValueHeads, full.IntermediateSize
	for _, l := range m.Layers {
		a, f := l.Attn, l.MLP
		errs := []error{
			rowsOf(a.Q, p.QHeads[0]*d, p.QHeads[1]*d, H*d, D),
			rowsOf(a.K, p.KVHeads[0]*d, p.KVHeads[1]*d, K*d, D),
			rowsOf(a.V, p.KVHeads[0]*d, p.KVHeads[1]*d, K*d, D),
			colsOf(a.O, p.QHeads[0]*d, p.QHeads[1]*d, D, H*d),
		}
		if f != nil { // a dense layer; an expert block's tensors are whole
			errs = append(errs,
				rowsOf(f.Gate, p.Inter[0], p.Inter[1], I, D),
				rowsOf(f.Up, p.Inter[0], p.Inter[1], I, D),
				colsOf(f.Down, p.Inter[0], p.Inter[1], D, I))
		}
		for _, e := range errs {
			if e != nil {
				return nil, fmt.Errorf("shard %d of %d: %w", p.Rank, p.Size, e)
			}
		}
	}
	return cuts, nil
}

// scaleCut is the cut of l's FP8 scales for weight rows [r0,r1) of out and
// columns [c0,c1) of in.
func scaleCut(l *nn.Linear, r0, r1, out, c0, c1, in int) (TensorCut, error) {
	B := l.FP8.Block
	if B <= 0 {
		return TensorCut{r0, r1, 0, 1}, nil
	}
	aligned := func(lo, hi, n int) bool { return lo%B == 0 && (hi%B == 0 || hi == n) }
	if !aligned(r0, r1, out) || !aligned(c0, c1, in) {
		return TensorCut{}, fmt.Errorf("%s: the shard's rows [%d,%d) and columns [%d,%d) do not align to the FP8 scale blocks of %d (use fewer devices, or a per-channel FP8 or BF16 checkpoint)",
			l.Node().Name(), r0, r1, c0, c1, B)
	}
	return TensorCut{r0 / B, (r1 + B - 1) / B, c0 / B, (c1 + B - 1) / B}, nil
}

// shardSource is a place.Source that gives each cut tensor's block of the
// underlying source (strided reads) and the others whole.
type shardSource struct {
	src  place.Source
	cuts map[string]TensorCut
	what string
}

// ShardSource is src with the tensors of cuts cut to their blocks; what
// names it in errors ("checkpoint D, shard 1 of 2").
func ShardSource(src place.Source, cuts map[string]TensorCut, what string) place.Source {
	return &shardSource{src: src, cuts: cuts, what: what}
}

// Dir names the source in place's errors.
func (s *shardSource) Dir() string { return s.what }

// matrix is a tensor shape as [rows, cols].
func matrix(shape []int) (rows, cols int, err error) {
	switch len(shape) {
	case 1:
		return shape[0], 1, nil
	case 2:
		return shape[0], shape[1], nil
	}
	return 0, 0, fmt.Errorf("a %d-D tensor cannot be cut (want 1-D or 2-D)", len(shape))
}

// Info is the tensor's info with the cut's shape and size; a cut tensor has
// no file location of its own.
func (s *shardSource) Info(name string) (loader.TensorInfo, error) {
	info, err := s.src.Info(name)
	if err != nil {
		return info, err
	}
	c, ok := s.cuts[name]
	if !ok {
		return info, nil
	}
	rows, cols, err := matrix(info.Shape)
	if err != nil {
		return info, fmt.Errorf("%s: tensor %s: %w", s.what, name, err)
	}
	if c.Row0 < 0 || c.Row1 > rows || c.Row0 >= c.Row1 || c.Col0 < 0 || c.Col1 > cols || c.Col0 >= c.Col1 {
		return info, fmt.Errorf("%s: tensor %s of shape %v: the shard's rows [%d,%d) and columns [%d,%d) lie outside it",
			s.what, name, info.Shape, c.Row0, c.Row1, c.Col0, c.Col1)
	}
	if len(info.Shape) == 1 {
		info.Shape = []int{c.Row1 - c.Row0}
	} else {
		info.Shape = []int{c.Row1 - c.Row0, c.Col1 - c.Col0}
	}
	info.Size = int64(c.Row1-c.Row0) * int64(c.Col1-c.Col0) * int64(info.DType.Size())
	info.File, info.Offset = "", 0
	return info, nil
}

// ReadAt reads bytes [off, off+len(dst)) of the cut tensor: row by row of
// the block, or in one read when the block has every column.
func (s *shardSource) ReadAt(name string, dst []byte, off int64) error {
	c, ok := s.cuts[name]
	if !ok {
		return s.src.ReadAt(name, dst, off)
	}
	info, err := s.src.Info(name)
	if err != nil {
		return err
	}
	_, cols, err := matrix(info.Shape)
	if err != nil {
		return fmt.Errorf("%s: tensor %s: %w", s.what, name, err)
	}
	es := int64(info.DType.Size())
	row, full := int64(c.Col1-c.Col0)*es, int64(cols)*es
	size := int64(c.Row1-c.Row0) * row
	if off < 0 || off+int64(len(dst)) > size {
		return fmt.Errorf("%s: tensor %s: read [%d,%d) outside its %d bytes", s.what, name, off, off+int64(len(dst)), size)
	}
	if row == full {
		return s.src.ReadAt(name, dst, int64(c.Row0)*full+off)
	}
	if m, ok := s.src.(place.Mapped); ok { // copy the rows out of the mapping: no read call per row
		data, err := m.Bytes(name)
		if err != nil {
			return err
		}
		for len(dst) > 0 {
			r, within := off/row, off%row
			at := (int64(c.Row0)+r)*full + int64(c.Col0)*es + within
			n := copy(dst, data[at:at+min(row-within, int64(len(dst)))])
			dst, off = dst[n:], off+int64(n)
		}
		return nil
	}
	for len(dst) > 0 {
		r, within := off/row, off%row
		n := min(row-within, int64(len(dst)))
		if err := s.src.ReadAt(name, dst[:n], (int64(c.Row0)+r)*full+int64(c.Col0)*es+within); err != nil {
			return err
		}
		dst, off = dst[n:], off+n
	}
	return nil
}

// BindShard binds shard m (made by NewShards with plan p from a model of
// config full) to its cut of the checkpoint on dev, with BindCheckpoint's
// checks. Nothing stays allocated after an error.
func (m *Model) BindShard(ck *loader.Checkpoint, dev runtime.Device, full *Config, p ShardPlan) error {
	if err := m.checkDTypes(ck.Info, "checkpoint "+ck.Dir()); err != nil {
		m.Close()
		return err
	}
	if missing := m.MissingTensors(ck); len(missing) > 0 {
		m.Close()
		return missingError(ck, missing, full)
	}
	whole, err := New(full, m.Names) // the full tree, no weights: what the checkpoint may hold (other shards' experts too)
	if err == nil {
		err = whole.checkUnused(ck)
	}
	if err != nil {
		m.Close()
		return err
	}
	cuts, err := ShardCuts(m, full, p)
	if err != nil {
		m.Close()
		return err
	}
	src := ShardSource(ck, cuts, fmt.Sprintf("%s (shard %d of %d)", ck.Dir(), p.Rank, p.Size))
	w, err := place.Bind(m, src, dev,
		place.WithShapes(m.ParamShapes(), fmt.Sprintf("shard %d of %d of the config (%s)", p.Rank, p.Size, full.Summary())),
		place.WithDTypes(func(d runtime.DType) bool { return SupportedWeightDType(d) || d == runtime.F8E4M3 },
			"the kernels take BF16, F16 or F32 weights, or F8_E4M3 ones with a quantization_config"))
	if err != nil {
		m.Close()
		return err
	}
	m.owned = append(m.owned, w.Buffers()...)
	return nil
}

// shardGroup is what the leader (rank 0's shard) of a sharded model holds:
// every shard, the backend each runs on, and the communicators.
type shardGroup struct {
	shards   []*Model
	backends []kernels.Backend
	comms    []runtime.Communicator
	broken   error // a forward failed on some rank: the collectives are aborted
}

// Group links shards, each bound on backends[i]'s device and holding rank i
// of comms, into one model: the returned model is shards[0], whose Forward,
// Generate and NewKVCache run every shard in lockstep (one goroutine per
// shard) and return rank 0's logits, which are the full model's. The
// leader's Close closes every shard and communicator; the devices stay the
// caller's. Offload each shard (Shards) before running, if at all.
func Group(shards []*Model, backends []kernels.Backend, comms []runtime.Communicator) (*Model, error) {
	n := len(shards)
	if n == 0 || len(backends) != n || len(comms) != n {
		return nil, fmt.Errorf("decoder.Group: %d shards, %d backends, %d communicators; want the same number, at least 1", n, len(backends), len(comms))
	}
	seen := map[runtime.Device]int{}
	for i := range shards {
		if comms[i].Rank() != i || comms[i].Size() != n {
			return nil, fmt.Errorf("decoder.Group: communicator %d is rank %d of %d; want rank %d of %d", i, comms[i].Rank(), comms[i].Size(), i, n)
		}
		dev := backends[i].Device()
		if j, ok := seen[dev]; ok {
			return nil, fmt.Errorf("decoder.Group: shards %d and %d are both on %s; each needs a device of its own", j, i, dev.Name())
		}
		seen[dev] = i
		if shards[i].group != nil || shards[i].tp != nil {
			return nil, fmt.Errorf("decoder.Group: shard %d is already in a group", i)
		}
	}
	for i, s := range shards {
		s.tp = comms[i]
	}
	shards[0].group = &shardGroup{shards: shards, backends: backends, comms: comms}
	return shards[0], nil
}

// Shards are the shards of a sharded model, rank 0 (m itself) first; nil
// for a model that is not sharded.
func (m *Model) Shards() []*Model {
	if m.group == nil {
		return nil
	}
	return m.group.shards
}

// ShardBackends are the backends the shards run on, rank 0 first; nil for
// a model that is not sharded.
func (m *Model) ShardBackends() []kernels.Backend {
	if m.group == nil {
		return nil
	}
	return m.group.backends
}

// allReduce sums the partial results t [T,D] of a shard's o_proj or
// down_proj over the shards (nothing on a model that is not sharded).
func (m *Model) allReduce(b kernels.Backend, t *runtime.Tensor) error {
	if m.tp == nil {
		return nil
	}
	return m.tp.AllReduceSum(t, b.Device().Compute())
}

// closeGroup closes the other shards and the communicators.
func (m *Model) closeGroup() {
	g := m.group
	if g == nil {
		return
	}
	m.group = nil
	for _, s := range g.shards[1:] {
		s.Close()
	}
	for _, c := range g.comms {
		c.Close()
	}
}

// forward runs every shard's forward of ids, each on its backend and its
// rank's cache (the leader's KVCache and its peers), and returns rank 0's
// logits. The errors every rank would meet alike are checked first; any
// other error aborts the collectives, and the model cannot run again.
func (g *shardGroup) forward(b kernels.Backend, cache Cache, ids []int32, allLogits bool) (*runtime.Tensor, error) {
	if g.broken != nil {
		return nil, fmt.Errorf("sharded model: an earlier forward failed on a device, which stopped the collectives (%v); open the model again", g.broken)
	}
	kv, ok := cache.(*KVCache)
	if !ok || len(kv.peers) != len(g.shards)-1 {
		return nil, fmt.Errorf("sharded model: the forward needs the KV cache the model's NewKVCache made (one per device), got %T", cache)
	}
	if b.Device() != g.backends[0].Device() {
		return nil, fmt.Errorf("sharded model: the backend is on %s, rank 0's shard on %s", b.Device().Name(), g.backends[0].Device().Name())
	}
	m := g.shards[0]
	if err := m.checkForward(cache, ids); err != nil {
		return nil, err
	}
	n := len(g.shards)
	errs := make([]error, n)
	var logits *runtime.Tensor
	run := func(r int) {
		defer func() {
			if p := recover(); p != nil {
				errs[r] = fmt.Errorf("shard %d panicked: %v", r, p)
			}
			if errs[r] != nil {
				g.comms[r].Abort(errs[r])
			}
		}()
		c, bk := Cache(kv), b
		if r > 0 {
			c, bk = kv.peers[r-1], g.backends[r]
		}
		lt, err := g.shards[r].localForward(bk, c, ids, allLogits)
		if err != nil {
			errs[r] = fmt.Errorf("%s: %w", bk.Device().Name(), err)
		}
		if r == 0 {
			logits = lt
		}
	}
	var wg sync.WaitGroup
	for r := 1; r < n; r++ {
		wg.Add(1)
		go func() { defer wg.Done(); run(r) }()
	}
	run(0)
	wg.Wait()
	var first error
	for _, e := range errs {
		if e != nil && (first == nil || errors.Is(first, runtime.ErrCommAborted) && !errors.Is(e, runtime.ErrCommAborted)) {
			first = e
		}
	}
	if first != nil {
		g.broken = first
		return nil, first
	}
	return logits, nil
}

// LoadSharded builds the model of the checkpoint in dir, cuts it over
// len(backends) shards (NewShards), binds shard i on bindOn[i] (its
// backend's device, or a host device when the shard is to be offloaded
// onto it) and links them with comms (Group). It returns the leader and the
// open checkpoint; close the leader, then the checkpoint. After an error
// nothing stays allocated.
func (build Builder) LoadSharded(dir string, bindOn []runtime.Device, backends []kernels.Backend, comms []runtime.Communicator) (*Model, *loader.Checkpoint, error) {
	if len(bindOn) != len(backends) {
		return nil, nil, fmt.Errorf("decoder.LoadSharded: %d devices to bind on for %d backends", len(bindOn), len(backends))
	}
	full, err := build(dir)
	if err != nil {
		return nil, nil, err
	}
	shards, plans, err := NewShards(full, len(backends))
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint %s over %d devices: %w", dir, len(backends), err)
	}
	ck, err := loader.OpenCheckpoint(dir)
	if err != nil {
		return nil, nil, err
	}
	closeAll := func() {
		for _, s := range shards {
			s.Close()
		}
		ck.Close()
	}
	for i, s := range shards {
		if err := s.BindShard(ck, bindOn[i], &full.Cfg, plans[i]); err != nil {
			closeAll()
			return nil, nil, err
		}
	}
	leader, err := Group(shards, backends, comms)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return leader, ck, nil
}
