package decoder_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/models/kvcache"
	"github.com/flextensor-go/flextensor/runtime"
)

func maxDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

// TestSolo: a paged sequence prefilled by ForwardBatch, stepped through a
// Solo (a capture, replays embedding the step buffer's token), gives the
// logits of eager steps over a contiguous cache; after Sync a batched
// forward continues the sequence as the eager steps do; every step
// committed its position in the sequence. Bad uses are errors: a backend
// that cannot capture (ErrNoGraph), no room, a step without a reserved
// position, a step after Stop (ErrClosed).
func TestSolo(t *testing.T) {
	m, b, _ := loadTiny(t)
	prompt, ids := []int32{5, 17, 42, 7}, []int32{9, 3, 11, 20}
	want := freshSteps(t, m, b, prompt, ids)
	paged, err := m.NewPagedCache(b, 8, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer paged.Close()
	seq := paged.NewSeq()
	if _, err := m.ForwardBatch(b, paged, []decoder.BatchEntry{{Seq: seq, IDs: prompt}}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.NewSolo(b, seq, 16); !errors.Is(err, decoder.ErrNoGraph) {
		t.Errorf("NewSolo on the CPU backend: %v, want ErrNoGraph", err)
	}
	f := newFakeFeeder(b, false)
	if _, err := m.NewSolo(f, seq, seq.Len()); err == nil {
		t.Error("NewSolo with no room after the sequence: no error")
	}
	solo, err := m.NewSolo(f, seq, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer solo.Close()
	if err := solo.StepFunc(ids[0], func(*runtime.Tensor) error { return nil }); err == nil {
		t.Error("a step with no position reserved: no error")
	}
	for k, id := range ids[:3] {
		if err := seq.Reserve(1); err != nil {
			t.Fatal(err)
		}
		var got []float32
		if err := solo.StepFunc(id, func(lt *runtime.Tensor) error {
			var err error
			got, err = testmodel.ReadLogits(f, lt)
			return err
		}); err != nil {
			t.Fatalf("solo step %d: %v", k, err)
		}
		if d := maxDiff(got, want[k+1]); d > 1e-4 {
			t.Errorf("solo step %d: logits differ from eager by %g", k, d)
		}
	}
	if len(f.errs) > 0 {
		t.Errorf("replays: %v", f.errs)
	}
	if seq.Len() != len(prompt)+3 || solo.Len() != seq.Len() {
		t.Errorf("after 3 solo steps: the sequence holds %d positions, the solo cache %d; want %d", seq.Len(), solo.Len(), len(prompt)+3)
	}
	if err := solo.Sync(); err != nil {
		t.Fatal(err)
	}
	lt, err := m.ForwardBatch(b, paged, []decoder.BatchEntry{{Seq: seq, IDs: ids[3:]}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := testmodel.ReadLogits(b, lt)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(got, want[4]); d > 1e-3 {
		t.Errorf("a batched step after Sync: logits differ from eager by %g", d)
	}
	if err := seq.Reserve(1); err != nil {
		t.Fatal(err)
	}
	if err := solo.StepFunc(ids[0], func(*runtime.Tensor) error { return nil }); err == nil {
		t.Error("a solo step after the sequence moved on in a batched forward: no error")
	}
	m.Stop()
	if err := solo.Sync(); !errors.Is(err, decoder.ErrClosed) {
		t.Errorf("Sync after Stop: %v, want ErrClosed", err)
	}
	solo.Close() // Stop freed it: nothing to do
	if _, err := m.NewSolo(f, seq, 32); !errors.Is(err, decoder.ErrClosed) {
		t.Errorf("NewSolo after Stop: %v, want ErrClosed", err)
	}
}

// TestSoloBadSeq: NewSolo of a sequence that belongs to no paged cache (a
// zero kvcache.Seq), or of one whose cache has another dtype or lives on
// another device than the backend's, is an error naming what is wrong, not
// a panic.
func TestSoloBadSeq(t *testing.T) {
	m, b, dev := loadTiny(t)
	f := newFakeFeeder(b, false)
	if _, err := m.NewSolo(f, &kvcache.Seq{}, 16); err == nil || !strings.Contains(err.Error(), "no paged cache") {
		t.Errorf("NewSolo of a zero Seq: %v", err)
	}
	other := runtime.NewCPUNamed("cpu:1", 0)
	defer other.Close()
	for _, tc := range []struct {
		dev runtime.Device
		dt  runtime.DType
	}{{dev, runtime.BF16}, {other, runtime.F32}} {
		paged, err := kvcache.New(tc.dev, tc.dt, m.PagedConfig(4, 4))
		if err != nil {
			t.Fatal(err)
		}
		seq := paged.NewSeq()
		if err := seq.Reserve(2); err != nil {
			t.Fatal(err)
		}
		if err := seq.Commit(2); err != nil {
			t.Fatal(err)
		}
		_, err = m.NewSolo(f, seq, 16)
		if err == nil || !strings.Contains(err.Error(), "the paged cache is "+tc.dt.String()) || !strings.Contains(err.Error(), tc.dev.Name()) {
			t.Errorf("NewSolo of a %v cache on %s: %v", tc.dt, tc.dev.Name(), err)
		}
		seq.Free()
		paged.Close()
	}
}
