package runtime

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"
)

func TestDTypeParseAndSize(t *testing.T) {
	for _, c := range []struct {
		s    string
		d    DType
		size int
	}{{"F32", F32, 4}, {"bf16", BF16, 2}, {"F16", F16, 2}, {"I32", I32, 4}, {"I64", I64, 8}, {"F8_E4M3", F8E4M3, 1}, {"f8_e5m2", F8E5M2, 1}} {
		d, err := ParseDType(c.s)
		if err != nil || d != c.d || d.Size() != c.size {
			t.Errorf("ParseDType(%q) = %v, %v (size %d); want %v size %d", c.s, d, err, d.Size(), c.d, c.size)
		}
	}
	if _, err := ParseDType("F8_E8M0"); err == nil || !strings.Contains(err.Error(), "F8_E8M0") {
		t.Errorf("unknown dtype error = %v, want it to name the dtype", err)
	}
}

func TestBF16RoundTrip(t *testing.T) {
	for b := 0; b < 1<<16; b++ {
		f := BF16ToF32(uint16(b))
		if f != f { // NaN stays NaN
			if g := BF16ToF32(F32ToBF16(f)); g == g {
				t.Fatalf("NaN %#04x did not stay NaN", b)
			}
			continue
		}
		if got := F32ToBF16(f); got != uint16(b) {
			t.Fatalf("F32ToBF16(BF16ToF32(%#04x)) = %#04x", b, got)
		}
	}
	// Round to nearest even: 1 + 2^-8 is halfway between 1 and 1+2^-7.
	if got := F32ToBF16(1 + 1.0/256); got != 0x3f80 {
		t.Errorf("tie rounding: got %#04x, want 0x3f80", got)
	}
}

func TestAccountingLimit(t *testing.T) {
	d := NewCPU(1000)
	a, err := d.Alloc(600, "a")
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.Alloc(500, "slot 3")
	if !errors.Is(err, ErrOutOfMemory) || !strings.Contains(err.Error(), `"slot 3"`) || !strings.Contains(err.Error(), "500 B") {
		t.Fatalf("over-limit error = %v; want ErrOutOfMemory naming the allocation and size", err)
	}
	if m := d.Memory(); m.InUse != 600 || m.Peak != 600 || m.Count != 1 {
		t.Fatalf("stats after failed alloc = %+v", m)
	}
	a.Free()
	a.Free() // second free is a no-op
	if m := d.Memory(); m.InUse != 0 || m.Peak != 600 {
		t.Fatalf("stats after free = %+v", m)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestCloseReportsLeaks(t *testing.T) {
	d := NewCPU(0)
	if _, err := d.AllocHost(64, "pinned block"); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err == nil || !strings.Contains(err.Error(), "host memory") {
		t.Fatalf("Close with a live host buffer = %v, want a leak error", err)
	}
}

// TestStreamOrdering: copies on the copy stream run in order on another
// goroutine; an event recorded after them tells the compute side when it may read.
func TestStreamOrdering(t *testing.T) {
	d := NewCPU(0)
	defer d.Close()
	s, err := d.NewStream("copy")
	if err != nil {
		t.Fatal(err)
	}
	host, _ := d.AllocHost(1<<20, "host")
	defer host.Free()
	dev, _ := d.Alloc(1<<20, "slot")
	defer dev.Free()
	for i := range host.Bytes() {
		host.Bytes()[i] = byte(i * 7)
	}
	// Two copies into the same slot: the second must land last.
	if err := s.CopyH2D(dev, 0, host, 0, 1<<20); err != nil {
		t.Fatal(err)
	}
	host2, _ := d.AllocHost(1<<20, "host2")
	defer host2.Free()
	host2.Bytes()[0] = 42
	if err := s.CopyH2D(dev, 0, host2, 0, 1); err != nil {
		t.Fatal(err)
	}
	ev, err := s.Record()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Compute().Wait(ev); err != nil {
		t.Fatal(err)
	}
	if dev.Bytes()[0] != 42 || !bytes.Equal(dev.Bytes()[1:], host.Bytes()[1:]) {
		t.Fatal("slot contents wrong after the event")
	}
	// A copy stream waiting on a compute event: the compute event is complete.
	ce, _ := d.Compute().Record()
	if err := s.Wait(ce); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	later, _ := s.Record()
	if err := later.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if el, err := later.ElapsedSince(ev); err != nil || el < 0 {
		t.Fatalf("ElapsedSince = %v, %v", el, err)
	}
}

func TestStreamErrorsAreSticky(t *testing.T) {
	d := NewCPU(0)
	defer d.Close()
	fail := errors.New("injected")
	d.CopyFault = func(string, int64) error { return fail }
	s, _ := d.NewStream("copy")
	h, _ := d.AllocHost(8, "h")
	defer h.Free()
	b, _ := d.Alloc(8, "b")
	defer b.Free()
	if err := s.CopyH2D(b, 0, h, 0, 8); err != nil {
		t.Fatal(err) // enqueue succeeds; the failure shows at the event
	}
	ev, _ := s.Record()
	if err := ev.Synchronize(); !errors.Is(err, fail) {
		t.Fatalf("event error = %v, want the injected failure", err)
	}
	if err := s.CopyH2D(b, 4, h, 0, 8); err == nil || !strings.Contains(err.Error(), "outside") {
		t.Fatalf("out-of-range copy = %v, want a range error", err)
	}
}

func TestTensorViews(t *testing.T) {
	d := NewCPU(0)
	defer d.Close()
	x, err := NewTensor(d, F32, Shape{4, 3}, "x")
	if err != nil {
		t.Fatal(err)
	}
	defer x.Buffer().Free()
	for i := range x.F32() {
		x.F32()[i] = float32(i)
	}
	row, err := x.Slice(2, 4)
	if err != nil {
		t.Fatal(err)
	}
	if got := row.F32(); len(got) != 6 || got[0] != 6 {
		t.Fatalf("slice view = %v", got)
	}
	row.F32()[0] = -1 // views share the buffer
	if x.F32()[6] != -1 {
		t.Fatal("view does not share its buffer")
	}
	if _, err := x.Reshape(5, 2); err == nil {
		t.Fatal("reshape to another element count succeeded")
	}
	if _, err := x.Slice(3, 5); err == nil {
		t.Fatal("slice past the end succeeded")
	}
}

func TestMetaHasNoStorage(t *testing.T) {
	m := NewMeta()
	x, err := NewTensor(m, BF16, Shape{1024, 1024}, "w")
	if err != nil {
		t.Fatal(err)
	}
	if x.Bytes() != nil || x.NumBytes() != 2<<20 || m.Memory().InUse != 2<<20 {
		t.Fatalf("meta tensor: bytes %v, NumBytes %d, in use %d", x.Bytes() != nil, x.NumBytes(), m.Memory().InUse)
	}
	if _, err := m.AllocHost(1, "h"); err == nil || !strings.Contains(err.Error(), "no storage") {
		t.Fatalf("meta AllocHost = %v", err)
	}
}

// TestConvert: F32 ↔ BF16 value by value as BF16ToF32 and F32ToBF16 do
// (rounding to nearest even, NaN kept), equal dtypes copied, other pairs an
// error naming them; a conversion split over goroutines gives every value.
func TestConvert(t *testing.T) {
	vals := []float32{0, -1.5, 3.1415927, 1e-30, -65504, float32(math.Inf(1)), float32(math.NaN())}
	f := make([]byte, 4*len(vals))
	for i, x := range vals {
		binary.LittleEndian.PutUint32(f[4*i:], math.Float32bits(x))
	}
	h := make([]byte, 2*len(vals))
	if err := Convert(h, BF16, f, F32); err != nil {
		t.Fatal(err)
	}
	back := make([]byte, len(f))
	if err := Convert(back, F32, h, BF16); err != nil {
		t.Fatal(err)
	}
	for i, x := range vals {
		b := binary.LittleEndian.Uint16(h[2*i:])
		if b != F32ToBF16(x) {
			t.Errorf("%g: bf16 %#04x, want %#04x", x, b, F32ToBF16(x))
		}
		y := math.Float32frombits(binary.LittleEndian.Uint32(back[4*i:]))
		if want := BF16ToF32(b); math.Float32bits(y) != math.Float32bits(want) {
			t.Errorf("%g: widened to %g, want %g", x, y, want)
		}
	}
	same := make([]byte, len(f))
	if err := Convert(same, F32, f, F32); err != nil || string(same) != string(f) {
		t.Errorf("F32 to F32: %v, bytes equal %v", err, string(same) == string(f))
	}
	if err := Convert(h, BF16, f, I32); err == nil || !strings.Contains(err.Error(), "I32") {
		t.Errorf("I32 to BF16: %v; want an error naming I32", err)
	}
	// Enough values for several goroutines (an odd count: uneven parts).
	n := 3*convertPart + 7
	big := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(big[4*i:], uint32(i)*2654435761)
	}
	bh := make([]byte, 2*n)
	if err := Convert(bh, BF16, big, F32); err != nil {
		t.Fatal(err)
	}
	bw := make([]byte, 4*n)
	if err := Convert(bw, F32, bh, BF16); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		x := math.Float32frombits(binary.LittleEndian.Uint32(big[4*i:]))
		b := binary.LittleEndian.Uint16(bh[2*i:])
		if b != F32ToBF16(x) || binary.LittleEndian.Uint32(bw[4*i:]) != math.Float32bits(BF16ToF32(b)) {
			t.Fatalf("value %d of %d: bf16 %#04x, want %#04x; widened %#08x", i, n, b, F32ToBF16(x), binary.LittleEndian.Uint32(bw[4*i:]))
		}
	}
}
