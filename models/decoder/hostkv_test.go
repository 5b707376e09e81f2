package decoder

import (
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/kernels/host"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/hostmem"
)

// TestHostKVBlocksResident: a host layer's KV storage (hostKV.alloc) is one
// block outside the Go heap, 2 MiB-aligned once it is at least a huge page,
// wholly resident when made (faulted in up front, so the timed decode
// steps that write later positions take no page faults), and on huge pages
// where the kernel's THP mode and free memory allow (logged: a kernel out
// of free huge pages is no fault of the code). Positions past the cached ones are exactly the ones a decode
// step writes first: the check reads residency before any such step.
func TestHostKVBlocksResident(t *testing.T) {
	if hostKVHeap {
		t.Skip("FT_HOST_KV=heap: the KV storage is on the Go heap")
	}
	dev := runtime.NewCPU(0)
	defer dev.Close()
	hb, err := host.New(dev, host.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer hb.Close()
	// Scale 8: 128 KV values a position, 512 bytes in F32; a cache of
	// 2,100 positions makes each layer's K and V ~1 MiB each, the block
	// ~2.1 MiB (two huge pages), of which the 8 cached positions moved in
	// write 8 KiB: the rest is resident only if the block was faulted in
	// when made.
	const capacity, cached = 2100, 8
	h, err := NewHostLayerBenchWith(hb, HostLayerBenchConfig{Scale: 8, Context: cached, Layers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	cb, err := kernels.NewCPUBackend(dev)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := h.m.NewKVCache(cb, capacity)
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Free()
	if err := kc.Commit(cached); err != nil {
		t.Fatal(err)
	}
	hc, err := hostCacheOf(kc, hb)
	if err != nil {
		t.Fatal(err)
	}
	kv, ok := hc.(*hostKV)
	if !ok {
		t.Fatalf("host cache is %T, want *hostKV", hc)
	}
	for l := range h.m.Layers {
		if err := kv.ensure(l); err != nil {
			t.Fatal(err)
		}
	}
	if len(kv.pools) != 2 {
		t.Fatalf("%d KV blocks for 2 host layers", len(kv.pools))
	}
	mode := hostmem.THPMode()
	for layer, hp := range kv.pools {
		blk := hp.Block
		k, v := kv.k[layer], kv.v[layer]
		if k == nil || v == nil {
			t.Fatalf("layer %d: block without tensors", layer)
		}
		per := k.NumBytes()
		if int64(len(blk.Bytes())) != 2*per {
			t.Fatalf("layer %d: block of %d bytes for K and V of %d each", layer, len(blk.Bytes()), per)
		}
		if 2*per < hostmem.HugePageSize {
			t.Fatalf("layer %d: K+V %d bytes, below a huge page: the case does not test huge blocks", layer, 2*per)
		}
		if !blk.Aligned || blk.MappedLen()%hostmem.HugePageSize != 0 {
			t.Fatalf("layer %d: block aligned %v, mapped %d bytes: want 2 MiB-aligned whole huge pages", layer, blk.Aligned, blk.MappedLen())
		}
		rss, huge, err := hostmem.Coverage([][]byte{blk.Bytes()})
		if err != nil {
			t.Skipf("no smaps: %v", err)
		}
		t.Logf("layer %d: K+V %d KiB, mapping(s) resident %d KiB, on huge pages %d KiB (THP %q)", layer, 2*per>>10, rss, huge, mode)
		// The block's own bytes must be resident. The mapping's tail past
		// them is resident too when the kernel gave huge pages, but not
		// when it fell back to 4 KiB pages (no free huge page: a loaded
		// machine), so the check is on the bytes used, not the mapping.
		if used := int64(len(blk.Bytes())) >> 10; rss < used {
			t.Fatalf("layer %d: %d KiB of the block's %d KiB resident before any decode step: not faulted in up front", layer, rss, used)
		}
		if mode != "never" && mode != "" && huge < blk.MappedLen()>>10 {
			// The kernel may have had no free huge page (MADV_COLLAPSE's
			// EAGAIN): worth a line, not a failure.
			t.Logf("layer %d: only %d KiB of the block's %d KiB on huge pages (THP %q)", layer, huge, blk.MappedLen()>>10, mode)
		}
	}
}
