package decoder_test

import (
	"errors"
	"testing"

	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/runtime"
)

// TestForwardAfterClose: Forward, ForwardBatch(Func), a captured decode
// graph's Step, CaptureDecode, NewKVCache and NewPagedCache on a closed
// model return an error wrapping
// decoder.ErrClosed and run nothing: no cache position is written or
// committed and no new workspace is allocated (before, Forward ran on the
// freed weights: on the CPU a misleading error about host-addressable
// memory and a workspace nothing freed, on a GPU freed device addresses).
func TestForwardAfterClose(t *testing.T) {
	m, b, dev := loadTiny(t)
	cache, err := m.NewKVCache(b, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Free()
	paged, err := m.NewPagedCache(b, 16, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer paged.Close()
	seq := paged.NewSeq()
	if _, err := m.Forward(b, cache, []int32{1, 2}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ForwardBatch(b, paged, []decoder.BatchEntry{{Seq: seq, IDs: []int32{3, 4}}}); err != nil {
		t.Fatal(err)
	}
	g, err := m.CaptureDecode(&fakeCapturer{Backend: b}, cache)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	m.Close()
	held := dev.Memory().InUse
	if _, err := m.Forward(b, cache, []int32{5}, false); !errors.Is(err, decoder.ErrClosed) {
		t.Errorf("Forward after Close: %v; want decoder.ErrClosed", err)
	}
	if _, err := m.ForwardBatch(b, paged, []decoder.BatchEntry{{Seq: seq, IDs: []int32{6}}}); !errors.Is(err, decoder.ErrClosed) {
		t.Errorf("ForwardBatch after Close: %v; want decoder.ErrClosed", err)
	}
	if _, err := g.Step(7); !errors.Is(err, decoder.ErrClosed) {
		t.Errorf("DecodeGraph.Step after Close: %v; want decoder.ErrClosed", err)
	}
	if _, err := m.NewPagedCache(b, 4, 8); !errors.Is(err, decoder.ErrClosed) {
		t.Errorf("NewPagedCache after Close: %v; want decoder.ErrClosed", err)
	}
	if _, err := m.NewKVCache(b, 4); !errors.Is(err, decoder.ErrClosed) {
		t.Errorf("NewKVCache after Close: %v; want decoder.ErrClosed", err)
	}
	if _, err := m.CaptureDecode(&fakeCapturer{Backend: b}, cache); !errors.Is(err, decoder.ErrClosed) {
		t.Errorf("CaptureDecode after Close: %v; want decoder.ErrClosed", err)
	}
	if err := m.ForwardBatchFunc(b, paged, []decoder.BatchEntry{{Seq: seq, IDs: []int32{6}}}, func(*runtime.Tensor) error { return nil }); !errors.Is(err, decoder.ErrClosed) {
		t.Errorf("ForwardBatchFunc after Close: %v; want decoder.ErrClosed", err)
	}
	if cache.Len() != 2 || seq.Len() != 2 {
		t.Errorf("cache lengths %d and %d after the refused forwards; want 2 and 2", cache.Len(), seq.Len())
	}
	if now := dev.Memory().InUse; now != held {
		t.Errorf("device memory in use went from %d to %d bytes over the refused forwards; want no allocation", held, now)
	}
}
