package place_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/place"
	"github.com/flextensor-go/flextensor/runtime"
)

// net is a custom module tree (not Llama): an embedding, two blocks of a
// linear and a norm, and a head tied to the embedding.
type net struct {
	nn.Base
	Embed  *nn.Embedding
	Blocks []*netBlock
	Head   *nn.Linear
}

type netBlock struct {
	nn.Base
	Proj *nn.Linear
	Norm *nn.RMSNorm
}

const vocab, dim = 10, 6

func newNet() *net {
	m := &net{}
	nn.Init(m, "")
	m.Embed = nn.NewEmbedding(m, "embed", vocab, dim)
	blocks := nn.NewContainer(m, "blocks")
	for i := 0; i < 2; i++ {
		b := &netBlock{}
		nn.Attach(blocks, fmt.Sprint(i), b)
		b.Proj = nn.NewLinear(b, "proj", dim, 2*dim)
		b.Norm = nn.NewRMSNorm(b, "norm", 2*dim, 1e-6)
		m.Blocks = append(m.Blocks, b)
	}
	m.Head = &nn.Linear{In: dim, Out: vocab}
	nn.Attach(m, "head", m.Head)
	m.Head.Weight = m.Embed.Weight
	nn.ShareParam(m.Head, m.Embed.Weight)
	return m
}

// shapes is what the net's parameters must be.
func (m *net) shapes() map[string]runtime.Shape {
	return map[string]runtime.Shape{
		"embed.weight":         {vocab, dim},
		"blocks.0.proj.weight": {2 * dim, dim},
		"blocks.0.norm.weight": {2 * dim},
		"blocks.1.proj.weight": {2 * dim, dim},
		"blocks.1.norm.weight": {2 * dim},
	}
}

// tensors are the checkpoint's tensors: distinct bytes per tensor, the
// norms in BF16, the rest in F32.
func tensors() []loader.NamedTensor {
	var out []loader.NamedTensor
	add := func(name string, dt runtime.DType, shape ...int) {
		n := dt.Size()
		for _, d := range shape {
			n *= d
		}
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(len(out)*31 + i*7 + 1)
		}
		out = append(out, loader.NamedTensor{Name: name, DType: dt, Shape: shape, Data: data})
	}
	add("embed.weight", runtime.F32, vocab, dim)
	for i := 0; i < 2; i++ {
		add(fmt.Sprintf("blocks.%d.proj.weight", i), runtime.F32, 2*dim, dim)
		add(fmt.Sprintf("blocks.%d.norm.weight", i), runtime.BF16, 2*dim)
	}
	add("unused.extra", runtime.F32, 3) // a checkpoint may hold more than the model
	return out
}

// writeCheckpoint writes ts as a checkpoint and opens it (closed by a
// cleanup).
var writeCheckpoint = testmodel.WriteCheckpoint

// stagedDevice hides the CPU device's Wrap: it has none of runtime's
// capabilities, so Bind takes the path a GPU takes (staged copies).
type stagedDevice struct{ runtime.Device }

// memSource is a Source held in memory (not Mapped).
type memSource struct {
	ts       map[string]loader.NamedTensor
	failRead string // ReadAt of this tensor fails
	reads    atomic.Int64
}

func newMemSource(ts []loader.NamedTensor) *memSource {
	s := &memSource{ts: map[string]loader.NamedTensor{}}
	for _, t := range ts {
		s.ts[t.Name] = t
	}
	return s
}

func (s *memSource) Info(name string) (loader.TensorInfo, error) {
	t, ok := s.ts[name]
	if !ok {
		return loader.TensorInfo{}, errors.New("not in the memory source")
	}
	return loader.TensorInfo{Name: name, DType: t.DType, Shape: t.Shape, Size: int64(len(t.Data))}, nil
}

func (s *memSource) ReadAt(name string, dst []byte, off int64) error {
	if name == s.failRead {
		return errors.New("disk on fire")
	}
	s.reads.Add(1)
	copy(dst, s.ts[name].Data[off:])
	return nil
}

// misaligned is a Mapped source whose views start at an odd address.
type misaligned struct{ *memSource }

func (s misaligned) Bytes(name string) ([]byte, error) {
	d := s.ts[name].Data
	b := make([]byte, len(d)+1)
	copy(b[1:], d)
	return b[1:], nil
}

// checkBound asserts every parameter holds its checkpoint bytes on dev, the
// head reads the embedding, and returns the bytes bound.
func checkBound(t *testing.T, m *net, dev runtime.Device, ts []loader.NamedTensor) int64 {
	t.Helper()
	want := map[string][]byte{}
	for _, x := range ts {
		want[x.Name] = x.Data
	}
	var n int64
	for _, p := range nn.Parameters(m) {
		x := p.Peek()
		if x == nil {
			t.Fatalf("%s not bound", p.Name())
		}
		if x.Device() != dev {
			t.Fatalf("%s on %s", p.Name(), x.Device().Name())
		}
		if !bytes.Equal(x.Bytes(), want[p.Name()]) {
			t.Fatalf("%s holds other bytes than the checkpoint's", p.Name())
		}
		n += x.NumBytes()
	}
	if m.Head.Weight.Peek() != m.Embed.Weight.Peek() {
		t.Fatal("the tied head does not read the embedding")
	}
	return n
}

func TestBindCPUIsZeroCopy(t *testing.T) {
	ts := tensors()
	ck := writeCheckpoint(t, ts)
	dev := runtime.NewCPU(0)
	m := newNet()
	w, err := place.Bind(m, ck, dev, place.WithShapes(m.shapes(), "the net"))
	if err != nil {
		t.Fatal(err)
	}
	n := checkBound(t, m, dev, ts)
	if got := dev.Memory().InUse; got != n || w.Bytes() != n || len(w.Buffers()) != 5 {
		t.Fatalf("device bytes %d, weights %d (%d buffers), want %d in 5", got, w.Bytes(), len(w.Buffers()), n)
	}
	for _, p := range nn.Parameters(m) {
		view, _ := ck.Bytes(p.Name())
		if unsafe.SliceData(p.Peek().Bytes()) != unsafe.SliceData(view) {
			t.Fatalf("%s was copied, not wrapped", p.Name())
		}
	}
	if dev.HostMemory().InUse != 0 {
		t.Fatal("the zero-copy path took staging memory")
	}
	w.Close()
	w.Close()
	if dev.Memory().InUse != 0 {
		t.Fatalf("after Close %d bytes in use", dev.Memory().InUse)
	}
}

func TestBindCPUCopiesWhatItCannotWrap(t *testing.T) {
	ts := tensors()
	for _, c := range []struct {
		name string
		src  place.Source
	}{{"not mapped", newMemSource(ts)}, {"misaligned", misaligned{newMemSource(ts)}}} {
		t.Run(c.name, func(t *testing.T) {
			dev := runtime.NewCPU(0)
			m := newNet()
			w, err := place.Bind(m, c.src, dev)
			if err != nil {
				t.Fatal(err)
			}
			n := checkBound(t, m, dev, ts)
			for _, p := range nn.Parameters(m) {
				if a := uintptr(unsafe.Pointer(unsafe.SliceData(p.Peek().Bytes()))); a%uintptr(p.Peek().DType().Size()) != 0 {
					t.Fatalf("%s is misaligned on the device", p.Name())
				}
			}
			if dev.Memory().InUse != n {
				t.Fatalf("device bytes %d, want %d", dev.Memory().InUse, n)
			}
			w.Close()
			if dev.Memory().InUse != 0 {
				t.Fatal("Close left bytes")
			}
		})
	}
}

func TestBindStaged(t *testing.T) {
	ts := tensors()
	ck := writeCheckpoint(t, ts)
	for _, c := range []struct {
		name   string
		chunk  int64
		bufs   int
		stream bool
	}{{"defaults", 0, 0, false}, {"small chunks", 40, 2, false}, {"small chunks on a copy stream", 24, 3, true}} {
		t.Run(c.name, func(t *testing.T) {
			cpu := runtime.NewCPU(0)
			dev := stagedDevice{cpu}
			var placed int64
			opts := []place.Option{place.WithStaging(place.StagerOptions{ChunkBytes: c.chunk, Buffers: c.bufs,
				Placed: func(n int64) { placed += n }})}
			if c.stream {
				s, err := dev.NewStream("copy")
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				opts = append(opts, place.WithStream(s))
			}
			m := newNet()
			w, err := place.Bind(m, ck, dev, opts...)
			if err != nil {
				t.Fatal(err)
			}
			n := checkBound(t, m, cpu, ts) // buffers belong to the device that allocated them
			for _, p := range nn.Parameters(m) {
				view, _ := ck.Bytes(p.Name())
				if unsafe.SliceData(p.Peek().Bytes()) == unsafe.SliceData(view) {
					t.Fatalf("%s was wrapped on a device without host memory", p.Name())
				}
			}
			if placed != n || cpu.Memory().InUse != n {
				t.Fatalf("placed %d, device bytes %d, want %d", placed, cpu.Memory().InUse, n)
			}
			if cpu.HostMemory().InUse != 0 || cpu.HostMemory().Peak == 0 {
				t.Fatalf("staging: %d bytes left, peak %d", cpu.HostMemory().InUse, cpu.HostMemory().Peak)
			}
			w.Close()
			if cpu.Memory().InUse != 0 {
				t.Fatal("Close left bytes")
			}
		})
	}
}

func TestBindMetaReadsNothing(t *testing.T) {
	ts := tensors()
	src := newMemSource(ts)
	src.failRead = "embed.weight" // a read would fail the bind
	dev := runtime.NewMeta()
	m := newNet()
	w, err := place.Bind(m, src, dev)
	if err != nil {
		t.Fatal(err)
	}
	if n := src.reads.Load(); n != 0 {
		t.Fatalf("%d reads on the meta device", n)
	}
	var n int64
	for _, p := range nn.Parameters(m) {
		if p.Peek() == nil || p.Peek().Device() != runtime.Device(dev) {
			t.Fatalf("%s not bound on meta", p.Name())
		}
		n += p.Peek().NumBytes()
	}
	if dev.Memory().InUse != n {
		t.Fatalf("meta bytes %d, want %d", dev.Memory().InUse, n)
	}
	w.Close()
}

// TestBindErrors: each error names the tensor and the source, leaves no
// byte allocated and no parameter bound.
func TestBindErrors(t *testing.T) {
	base := tensors()
	with := func(edit func(ts []loader.NamedTensor) []loader.NamedTensor) []loader.NamedTensor {
		ts := make([]loader.NamedTensor, len(base))
		copy(ts, base)
		return edit(ts)
	}
	drop := func(name string) []loader.NamedTensor {
		return with(func(ts []loader.NamedTensor) []loader.NamedTensor {
			var out []loader.NamedTensor
			for _, x := range ts {
				if x.Name != name {
					out = append(out, x)
				}
			}
			return out
		})
	}
	reshape := func(name string, dt runtime.DType, shape ...int) []loader.NamedTensor {
		return with(func(ts []loader.NamedTensor) []loader.NamedTensor {
			for i, x := range ts {
				if x.Name == name {
					n := dt.Size()
					for _, d := range shape {
						n *= d
					}
					ts[i] = loader.NamedTensor{Name: name, DType: dt, Shape: shape, Data: make([]byte, n)}
				}
			}
			return ts
		})
	}
	supported := func(d runtime.DType) bool { return d == runtime.F32 || d == runtime.BF16 }
	cases := []struct {
		name    string
		ts      []loader.NamedTensor
		opts    func(m *net) []place.Option
		prebind bool // bind meta tensors of the right shapes first
		limit   int64
		staged  bool
		fail    string // ReadAt fails on this tensor (memory source)
		want    []string
	}{
		{name: "missing tensor", ts: drop("blocks.1.norm.weight"),
			want: []string{"no tensor", "blocks.1.norm.weight", "checkpoint "}},
		{name: "shape against WithShapes", ts: reshape("blocks.0.proj.weight", runtime.F32, dim, 2*dim),
			opts: func(m *net) []place.Option { return []place.Option{place.WithShapes(m.shapes(), "the config (dim 6)")} },
			want: []string{"tensor blocks.0.proj.weight has shape [6 12], the config (dim 6) implies [12 6]", "checkpoint "}},
		{name: "shape against the parameter's tensor", ts: reshape("embed.weight", runtime.F32, vocab+1, dim), prebind: true,
			want: []string{"tensor embed.weight has shape [11 6], the model's parameter has [10 6]"}},
		{name: "unsupported dtype", ts: reshape("blocks.1.norm.weight", runtime.I32, 2*dim),
			opts: func(*net) []place.Option {
				return []place.Option{place.WithDTypes(supported, "the kernels take BF16 or F32 weights")}
			},
			want: []string{"tensor blocks.1.norm.weight has dtype I32; the kernels take BF16 or F32 weights"}},
		{name: "dtype against the parameter's tensor", ts: reshape("blocks.0.norm.weight", runtime.F32, 2*dim), prebind: true,
			want: []string{"tensor blocks.0.norm.weight has dtype F32, the model's parameter holds BF16"}},
		{name: "out of device memory", ts: base, limit: 300, staged: true,
			want: []string{"loading ", "onto cpu", "out of memory"}},
		{name: "read fails while staging", ts: base, staged: true, fail: "blocks.1.proj.weight",
			want: []string{"blocks.1.proj.weight", "disk on fire"}},
		{name: "read fails on the host path", ts: base, fail: "blocks.0.proj.weight",
			want: []string{"disk on fire"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cpu := runtime.NewCPU(c.limit)
			var dev runtime.Device = cpu
			if c.staged {
				dev = stagedDevice{cpu}
			}
			var src place.Source
			if c.fail != "" {
				ms := newMemSource(c.ts)
				ms.failRead = c.fail
				src = ms
			} else {
				src = writeCheckpoint(t, c.ts)
			}
			m := newNet()
			meta := runtime.NewMeta()
			before := map[string]*runtime.Tensor{}
			if c.prebind {
				for _, x := range base {
					if mod, err := nn.Find(m, strings.TrimSuffix(x.Name, ".weight")); err == nil {
						for _, p := range mod.Node().Params() {
							mt, err := runtime.NewTensor(meta, x.DType, x.Shape, x.Name)
							if err != nil {
								t.Fatal(err)
							}
							if err := p.Bind(mt); err != nil {
								t.Fatal(err)
							}
						}
					}
				}
			}
			for _, p := range nn.Parameters(m) {
				before[p.Name()] = p.Peek()
			}
			var opts []place.Option
			if c.opts != nil {
				opts = c.opts(m)
			}
			w, err := place.Bind(m, src, dev, opts...)
			if err == nil {
				w.Close()
				t.Fatal("Bind succeeded")
			}
			for _, s := range c.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
			if cpu.Memory().InUse != 0 || cpu.HostMemory().InUse != 0 {
				t.Errorf("after the error: %d device, %d host bytes in use", cpu.Memory().InUse, cpu.HostMemory().InUse)
			}
			for _, p := range nn.Parameters(m) {
				if p.Peek() != before[p.Name()] {
					t.Errorf("%s was re-bound by a failed Bind", p.Name())
				}
			}
		})
	}
}

func TestStagerUploadsPiecesAndHostBlocks(t *testing.T) {
	dev := runtime.NewCPU(0)
	dst, err := dev.Alloc(100, "dst")
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Free()
	host, err := dev.AllocHost(16, "packed")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Free()
	for i := range host.Bytes() {
		host.Bytes()[i] = 0xA0 + byte(i)
	}
	src := make([]byte, 70)
	for i := range src {
		src[i] = byte(i + 1)
	}
	s, _ := dev.NewStream("copy")
	defer s.Close()
	st := place.NewStager(dev, place.StagerOptions{ChunkBytes: 16, Buffers: 2})
	defer st.Free()
	err = st.Upload(s, []place.Piece{
		{Dst: dst, Off: 10, Size: 70, Name: "read", Read: func(p []byte, off int64) error { copy(p, src[off:]); return nil }},
		{Dst: dst, Off: 84, Size: 16, Name: "host", From: host},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 100)
	copy(want[10:], src)
	copy(want[84:], host.Bytes())
	if !bytes.Equal(dst.Bytes(), want) {
		t.Fatalf("device bytes\n got %v\nwant %v", dst.Bytes(), want)
	}
	if dev.HostMemory().InUse != 16+2*16 {
		t.Fatalf("staging kept %d host bytes, want two 16-byte buffers and the block", dev.HostMemory().InUse)
	}
	// Out of range pieces are refused before anything is copied.
	err = st.Upload(s, []place.Piece{{Dst: dst, Off: 90, Size: 20, Name: "too far", From: host}})
	if err == nil || !strings.Contains(err.Error(), "too far") {
		t.Fatalf("out-of-range piece: %v", err)
	}
}

// TestBindNilDevice: Bind with a nil device is an error naming it, and
// nothing is bound.
func TestBindNilDevice(t *testing.T) {
	m := newNet()
	if _, err := place.Bind(m, newMemSource(tensors()), nil); err == nil || !strings.Contains(err.Error(), "nil device") {
		t.Errorf("Bind on a nil device: %v", err)
	}
	if m.Embed.Weight.Peek() != nil {
		t.Error("Bind on a nil device bound a parameter")
	}
}
