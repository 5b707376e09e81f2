package decoder_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/place"
	"github.com/flextensor-go/flextensor/runtime"
)

func TestPlanShards(t *testing.T) {
	c := decoder.Config{NumAttentionHeads: 8, NumKeyValueHeads: 2, IntermediateSize: 96}
	// Two ranks: one KV head each with its 4 query heads.
	p, err := decoder.PlanShards(&c, 2)
	if err != nil {
		t.Fatal(err)
	}
	if p[1].QHeads != [2]int{4, 8} || p[1].KVHeads != [2]int{1, 2} || p[1].Inter != [2]int{48, 96} {
		t.Fatalf("2 ranks: rank 1 %+v", p[1])
	}
	// Four ranks: KV head 0 replicated on ranks 0 and 1, 1 on ranks 2 and 3;
	// each rank's query heads read its KV head (group of 4 query heads).
	p, err = decoder.PlanShards(&c, 4)
	if err != nil {
		t.Fatal(err)
	}
	for r, want := range [][2]int{{0, 1}, {0, 1}, {1, 2}, {1, 2}} {
		if p[r].KVHeads != want || p[r].QHeads != [2]int{2 * r, 2*r + 2} {
			t.Fatalf("4 ranks: rank %d %+v", r, p[r])
		}
		sc := p[r].Config(&c)
		if sc.NumAttentionHeads != 2 || sc.NumKeyValueHeads != 1 || sc.IntermediateSize != 24 {
			t.Fatalf("rank %d config %+v", r, sc)
		}
	}
	for _, bad := range []struct {
		n    int
		c    decoder.Config
		want string
	}{
		{3, c, "attention heads do not split"},
		{0, c, "at least 1"},
		{4, decoder.Config{NumAttentionHeads: 12, NumKeyValueHeads: 3, IntermediateSize: 96}, "whole groups"},
		{2, decoder.Config{NumAttentionHeads: 8, NumKeyValueHeads: 2, IntermediateSize: 95}, "intermediate size 95"},
	} {
		if _, err := decoder.PlanShards(&bad.c, bad.n); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%d ranks of %+v: %v, want an error with %q", bad.n, bad.c, err, bad.want)
		}
	}
}

// TestPlanShardsMoE: experts go E·r/n .. E·(r+1)/n to rank r (uneven
// when n does not divide E), the router whole; the intermediate size need
// not split when every layer is sparse; more devices than experts is
// refused.
func TestPlanShardsMoE(t *testing.T) {
	moe := decoder.Config{NumHiddenLayers: 2, NumAttentionHeads: 4, NumKeyValueHeads: 2, IntermediateSize: 95,
		MoE: decoder.MoE{Experts: 6, TopK: 2, IntermediateSize: 32, SparseStep: 1}}
	p, err := decoder.PlanShards(&moe, 4)
	if err != nil {
		t.Fatal(err)
	}
	for r, want := range [][2]int{{0, 1}, {1, 3}, {3, 4}, {4, 6}} {
		if p[r].Experts != want {
			t.Fatalf("rank %d experts %v, want %v", r, p[r].Experts, want)
		}
		sc := p[r].Config(&moe)
		if lo, hi := sc.MoE.OwnedRange(); lo != want[0] || hi != want[1] || sc.MoE.Experts != 6 {
			t.Fatalf("rank %d config holds experts [%d,%d) of %d", r, lo, hi, sc.MoE.Experts)
		}
		if !strings.Contains(sc.Summary(), fmt.Sprintf("holding experts %d..%d", want[0], want[1]-1)) {
			t.Errorf("rank %d summary %q", r, sc.Summary())
		}
	}
	if lo, hi := moe.MoE.OwnedRange(); lo != 0 || hi != 6 {
		t.Errorf("unsharded config holds [%d,%d)", lo, hi)
	}
	dense := moe
	dense.MoE.DenseLayers = []int{1}
	for _, bad := range []struct {
		n    int
		c    decoder.Config
		want string
	}{
		{2, dense, "intermediate size 95"},
		{8, func() decoder.Config { c := moe; c.NumAttentionHeads, c.NumKeyValueHeads = 8, 8; return c }(), "6 experts do not go round 8 devices"},
	} {
		if _, err := decoder.PlanShards(&bad.c, bad.n); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%d ranks: %v, want an error with %q", bad.n, err, bad.want)
		}
	}
}

// TestShardSourceCuts: a shard's tensors are the right blocks of the
// checkpoint's: q rows of its heads, o_proj columns, down_proj columns.
func TestShardSourceCuts(t *testing.T) {
	m, _, _ := loadTiny(t)
	ck, err := loader.OpenCheckpoint(tinyDir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	shards, plans, err := decoder.NewShards(m, 2)
	if err != nil {
		t.Fatal(err)
	}
	cuts, err := decoder.ShardCuts(shards[1], &m.Cfg, plans[1])
	if err != nil {
		t.Fatal(err)
	}
	// Through the mapping, and through ReadAt (a source that maps nothing).
	for _, src := range []place.Source{decoder.ShardSource(ck, cuts, "test"), decoder.ShardSource(readOnly{ck}, cuts, "test")} {
		checkCuts(t, m, ck, src)
	}
}

// readOnly hides a source's mapping.
type readOnly struct{ place.Source }

func checkCuts(t *testing.T, m *decoder.Model, ck *loader.Checkpoint, src place.Source) {
	t.Helper()
	d := m.Cfg.HeadDim
	for _, c := range []struct {
		name           string
		r0, r1, c0, c1 int
	}{
		{"model.layers.1.self_attn.q_proj.weight", 2 * d, 4 * d, 0, m.Cfg.HiddenSize},
		{"model.layers.1.self_attn.k_proj.weight", d, 2 * d, 0, m.Cfg.HiddenSize},
		{"model.layers.1.self_attn.o_proj.weight", 0, m.Cfg.HiddenSize, 2 * d, 4 * d},
		{"model.layers.1.mlp.down_proj.weight", 0, m.Cfg.HiddenSize, m.Cfg.IntermediateSize / 2, m.Cfg.IntermediateSize},
		{"model.norm.weight", 0, m.Cfg.HiddenSize, 0, 1},
	} {
		full, err := ck.Bytes(c.name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := ck.Info(c.name)
		if err != nil {
			t.Fatal(err)
		}
		cols, es := 1, info.DType.Size()
		if len(info.Shape) == 2 {
			cols = info.Shape[1]
		}
		var want []byte
		for r := c.r0; r < c.r1; r++ {
			want = append(want, full[(r*cols+c.c0)*es:(r*cols+c.c1)*es]...)
		}
		si, err := src.Info(c.name)
		if err != nil {
			t.Fatal(err)
		}
		if si.Size != int64(len(want)) {
			t.Fatalf("%s: size %d, want %d", c.name, si.Size, len(want))
		}
		// Read in odd pieces, crossing rows.
		got := make([]byte, len(want))
		for off := 0; off < len(got); off += 37 {
			if err := src.ReadAt(c.name, got[off:min(off+37, len(got))], int64(off)); err != nil {
				t.Fatal(err)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: the shard's bytes differ from the checkpoint's block", c.name)
		}
	}
	if err := src.ReadAt("model.layers.1.self_attn.o_proj.weight", make([]byte, 8), 1<<30); err == nil {
		t.Fatal("a read past the cut succeeded")
	}
}

// TestShardedForwardErrors: the errors every rank would meet alike are
// reported without stopping the group; a forward that fails on one rank
// aborts the collectives, and the model then says so.
func TestShardedForwardErrors(t *testing.T) {
	full, _, _ := loadTiny(t)
	ck, err := loader.OpenCheckpoint(tinyDir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	shards, plans, err := decoder.NewShards(full, 2)
	if err != nil {
		t.Fatal(err)
	}
	var backends []kernels.Backend
	for i, s := range shards {
		dev := runtime.NewCPUNamed("cpu:"+string(rune('0'+i)), 0)
		defer dev.Close()
		b, err := kernels.NewCPUBackend(dev)
		if err != nil {
			t.Fatal(err)
		}
		backends = append(backends, b)
		if err := s.BindShard(ck, dev, &full.Cfg, plans[i]); err != nil {
			t.Fatal(err)
		}
	}
	g, _ := runtime.NewCPUGroup(2)
	if _, err := decoder.Group(shards, backends[:1], g.Members()); err == nil {
		t.Fatal("Group with one backend for two shards")
	}
	if _, err := decoder.Group(shards, []kernels.Backend{backends[0], backends[0]}, g.Members()); err == nil || !strings.Contains(err.Error(), "both on cpu:0") {
		t.Fatalf("two shards on one device: %v", err)
	}
	m, err := decoder.Group(shards, backends, g.Members())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cache, err := m.NewKVCache(backends[0], 4)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Free()
	if _, err := m.Forward(backends[0], cache, []int32{1, 2, 3, 4, 5}, false); err == nil || !strings.Contains(err.Error(), "capacity") {
		t.Fatalf("too many tokens: %v", err)
	}
	other, err := full.NewKVCache(backends[0], 4) // not the sharded model's
	if err != nil {
		t.Fatal(err)
	}
	defer other.Free()
	if _, err := m.Forward(backends[0], other, []int32{1}, false); err == nil || !strings.Contains(err.Error(), "NewKVCache") {
		t.Fatalf("a foreign cache: %v", err)
	}
	if _, err := m.Forward(backends[0], cache, []int32{1, 2}, false); err != nil {
		t.Fatalf("a good forward after the refused ones: %v", err)
	}
	// A hook fails rank 1's second layer: rank 0, waiting in that layer's
	// all-reduce, is released, the error names the device, and the model
	// refuses to run again.
	remove := shards[1].Node().Tree().AddHook(failAt{name: "model.layers.1"})
	_, err = m.Forward(backends[0], cache, []int32{3}, false)
	remove()
	if err == nil || !strings.Contains(err.Error(), "cpu:1") || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("a forward failing on rank 1: %v", err)
	}
	if _, err := m.Forward(backends[0], cache, []int32{3}, false); err == nil || !strings.Contains(err.Error(), "open the model again") {
		t.Fatalf("a forward after a failed one: %v", err)
	}
	if _, err := m.NewPagedCache(backends[0], 4, 0); err == nil {
		t.Fatal("a paged cache for a sharded model")
	}
}

// failAt is an nn hook failing the module named name.
type failAt struct{ name string }

func (f failAt) Enter(m nn.Module) error {
	if m.Node().Name() == f.name {
		return errors.New("injected failure")
	}
	return nil
}

func (f failAt) Exit(_ nn.Module, err error) error { return err }
