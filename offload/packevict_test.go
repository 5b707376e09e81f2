package offload_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/place"
	"github.com/flextensor-go/flextensor/runtime"
)

// TestPackEvict: with FT_PACK_EVICT's switch on, a tower whose weights are
// views of a mapped checkpoint (as the CLI loads them on the host) packs
// and runs to the same outputs as with it off; the checkpoint's file is
// evicted before each pack, every packed unit's tensors are evicted from
// that file after their read, and within each pack every block is
// allocated before the first read.
func TestPackEvict(t *testing.T) {
	const depth, dim, hidden = 5, 32, 64
	host := runtime.NewCPU(0)
	src, err := NewTower(host, depth, dim, hidden, 7)
	if err != nil {
		t.Fatal(err)
	}
	ck := testmodel.WriteCheckpoint(t, namedTensors(src, ""))
	x, _ := runtime.NewTensor(host, runtime.F32, runtime.Shape{2, dim}, "x")
	for i := range x.F32() {
		x.F32()[i] = float32(i%7) - 3
	}

	run := func(evict bool) ([]float32, offload.EvictRecord) {
		snapshot, restore := offload.SetPackEvictForTest(evict)
		defer restore()
		cpu := runtime.NewCPU(0)
		m, err := NewTower(cpu, depth, dim, hidden, 99) // weights replaced by the checkpoint's
		if err != nil {
			t.Fatal(err)
		}
		if _, err := place.Bind(m, ck, cpu); err != nil {
			t.Fatal(err)
		}
		dev := runtime.NewCPU(0)
		name := uniqueName(t)
		cfg := offload.DefaultConfig(dev)
		cfg.Include = []string{"blocks.*"}
		cfg.GPUBudget = offload.Budget{Bytes: 256 + 3*3*dim*hidden*4}
		cfg.TransferBlocks = 2
		if err := offload.Offload(m, &cfg, name); err != nil {
			t.Fatal(err)
		}
		k, _ := kernels.NewCPUBackend(dev)
		in, _ := runtime.NewTensor(dev, runtime.F32, runtime.Shape{2, dim}, "x")
		copy(in.F32(), x.F32())
		var got []float32
		for pass := 0; pass < 4; pass++ {
			out, err := m.Forward(strictBackend{k, dev}, in)
			if err != nil {
				t.Fatal(err)
			}
			if got == nil {
				got = append([]float32(nil), out.F32()...)
			} else if !slices.Equal(got, out.F32()) {
				t.Fatalf("evict=%v pass %d: output changed between passes", evict, pass)
			}
			out.Buffer().Free()
		}
		if err := offload.Release(name, false); err != nil {
			t.Fatal(err)
		}
		return got, snapshot()
	}

	want, off := run(false)
	if slices.Contains(off.Events, "evict") || len(off.Files) != 0 || off.Ranges != 0 || off.Missed != 0 {
		t.Fatalf("switch off: eviction ran: %+v", off)
	}
	got, on := run(true)
	if !slices.Equal(got, want) {
		t.Fatalf("switch on: outputs %v, want %v", got, want)
	}
	if !slices.Contains(on.Files, ck.Files()[0]) {
		t.Errorf("files evicted before packing: %q, want %s among them", on.Files, ck.Files()[0])
	}
	if on.Missed != 0 {
		t.Errorf("%d unit tensors were not found in a mapped file (weights should be views of the checkpoint)", on.Missed)
	}
	// Split the events at each pack's eviction; in each pack no block is
	// allocated after a read, and each unit is allocated and read once.
	var packs [][]string
	for _, e := range on.Events {
		if e == "evict" {
			packs = append(packs, nil)
			continue
		}
		if len(packs) == 0 {
			t.Fatalf("event %q before any eviction: %q", e, on.Events)
		}
		packs[len(packs)-1] = append(packs[len(packs)-1], e)
	}
	if len(packs) == 0 {
		t.Fatal("switch on: no pack evicted the checkpoint")
	}
	readUnits := 0
	for i, p := range packs {
		read := false
		allocs, reads := map[string]int{}, map[string]int{}
		for _, e := range p {
			kind, unit, _ := strings.Cut(e, " ")
			switch kind {
			case "read":
				read = true
				reads[unit]++
			case "alloc":
				if read {
					t.Errorf("pack %d: %q after a read: %q", i, e, p)
				}
				allocs[unit]++
			}
		}
		if len(allocs) != len(reads) {
			t.Errorf("pack %d: %d units allocated, %d read: %q", i, len(allocs), len(reads), p)
		}
		for u, n := range reads {
			if n != 1 || allocs[u] != 1 {
				t.Errorf("pack %d: unit %s allocated %d times, read %d times", i, u, allocs[u], n)
			}
		}
		readUnits += len(reads)
	}
	// Each unit read had each of its parameters' file bytes evicted.
	perUnit := len(nn.Parameters(src.Blocks[0]))
	if on.Ranges != readUnits*perUnit {
		t.Errorf("evicted %d tensor ranges after reads; want %d (%d units read x %d tensors)", on.Ranges, readUnits*perUnit, readUnits, perUnit)
	}
	if readUnits < depth {
		t.Errorf("%d units read over %d packs; want at least all %d", readUnits, len(packs), depth)
	}
}
