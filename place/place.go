// Package place is the one path that puts weights on a device: tensors read
// by name from a Source (a checkpoint) become device buffers bound to a
// module tree's parameters. How depends on what the device can do, found
// through runtime's capability interfaces: on a host-memory device (the CPU)
// mapped checkpoint bytes are wrapped without a copy; on a storageless device
// (meta) only sizes are accounted; on any other device (a GPU) the bytes are
// staged through a few host buffers (pinned) and copied on a stream, reads
// overlapping copies (Stager, which the offload engine also uploads with).
package place

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// Source is where weights come from: tensors looked up by qualified name
// ("model.layers.0.mlp.up_proj.weight"). *loader.Checkpoint is one. Its
// methods may be called from several goroutines at once.
type Source interface {
	// Info gives the tensor's dtype, shape and size; a name the source
	// lacks is an error.
	Info(name string) (loader.TensorInfo, error)
	// ReadAt fills dst with bytes [off, off+len(dst)) of the named tensor.
	ReadAt(name string, dst []byte, off int64) error
}

// Mapped is a Source whose tensors' bytes can be viewed in place (memory-
// mapped files): on a host-memory device Bind wraps them without a copy.
// *loader.Checkpoint is one.
type Mapped interface {
	// Bytes is a read-only view of the tensor's bytes.
	Bytes(name string) ([]byte, error)
}

// Located is a Source that says where it is (a checkpoint's directory), for
// error messages. *loader.Checkpoint is one.
type Located interface {
	// Dir is the source's directory.
	Dir() string
}

var (
	_ Source  = (*loader.Checkpoint)(nil)
	_ Mapped  = (*loader.Checkpoint)(nil)
	_ Located = (*loader.Checkpoint)(nil)
)

// Describe names src in errors: "checkpoint <dir>" for a Located source.
func Describe(src Source) string {
	if l, ok := src.(Located); ok {
		return "checkpoint " + l.Dir()
	}
	return "weight source"
}

// Option tunes Bind.
type Option func(*options)

type options struct {
	shapes    map[string]runtime.Shape
	shapesBy  string
	dtypeOK   func(runtime.DType) bool
	dtypeWhy  string
	stager    StagerOptions
	stream    runtime.Stream
	hasStream bool
}

// WithShapes gives the shape each parameter must have, by qualified name;
// by names the shapes' origin in errors ("the config (hidden 64, ...)"):
// "checkpoint D: tensor N has shape [a b], <by> implies [c d]". Without it a
// parameter that already holds a tensor (a meta one, say) must keep its
// shape, and one that holds nothing takes the source's.
func WithShapes(shapes map[string]runtime.Shape, by string) Option {
	return func(o *options) { o.shapes, o.shapesBy = shapes, by }
}

// WithDTypes accepts only the dtypes ok reports true for; why says what is
// accepted, in errors ("the kernels take BF16, F16 or F32 weights"):
// "checkpoint D: tensor N has dtype I8; <why>".
func WithDTypes(ok func(runtime.DType) bool, why string) Option {
	return func(o *options) { o.dtypeOK, o.dtypeWhy = ok, why }
}

// WithStaging tunes the staged path (staging buffer size and count, how they
// are allocated, progress); it does not apply to the other paths.
func WithStaging(so StagerOptions) Option { return func(o *options) { o.stager = so } }

// WithStream makes the staged path copy on s instead of the device's
// compute stream.
func WithStream(s runtime.Stream) Option {
	return func(o *options) { o.stream, o.hasStream = s, true }
}

// Weights is what Bind allocated: the device buffers behind the bound
// parameters. Close frees them; the parameters then point at freed memory,
// so the model must not run after.
type Weights struct {
	bufs  []*runtime.DeviceBuffer
	bytes int64
}

// Buffers are the device buffers in binding order: one per tensor on
// host-memory devices, one per run of sibling parameters (packGroups) on
// the others.
func (w *Weights) Buffers() []*runtime.DeviceBuffer { return w.bufs }

// Bytes is the device bytes the buffers account for.
func (w *Weights) Bytes() int64 { return w.bytes }

// Close frees every buffer. A second Close is a no-op.
func (w *Weights) Close() {
	if w == nil {
		return
	}
	for _, b := range w.bufs {
		b.Free()
	}
	w.bufs, w.bytes = nil, 0
}

// binding is one parameter and the source tensor it will hold.
type binding struct {
	p     *nn.Parameter
	name  string
	dtype runtime.DType
	shape runtime.Shape
	size  int64
	buf   *runtime.DeviceBuffer
	off   int64 // the tensor's offset in buf (packed siblings, see packGroups)
	t     *runtime.Tensor
}

// Bind binds every parameter of root's tree (each once: a tied parameter is
// looked up by its owner's name) to the source tensor of the same qualified
// name, placed on dev. Shapes and dtypes are checked first (see WithShapes
// and WithDTypes), then everything is placed, then bound: on any error
// nothing stays allocated, no parameter is re-bound, and the error names
// the tensor and the source. The placement:
//
//   - a runtime.StoragelessDevice (meta): sizes only, nothing read;
//   - a runtime.HostMemoryDevice (cpu): a Mapped source's bytes are wrapped
//     without a copy when aligned to their dtype, else copied (or read) into
//     device memory;
//   - any other device: device buffers filled through a Stager on the
//     device's compute stream (WithStream, WithStaging).
//
// A nil src or dev is an error.
func Bind(root nn.Module, src Source, dev runtime.Device, opts ...Option) (_ *Weights, err error) {
	if src == nil {
		return nil, errors.New("place.Bind: no weight source")
	}
	if dev == nil {
		return nil, errors.New("place.Bind: nil device")
	}
	var o options
	for _, f := range opts {
		f(&o)
	}
	where := Describe(src)
	var bs []*binding
	for _, p := range nn.Parameters(root) {
		b, err := plan(p, src, where, &o)
		if err != nil {
			return nil, err
		}
		bs = append(bs, b)
	}
	w := &Weights{}
	defer func() {
		if err != nil {
			w.Close()
		}
	}()
	if err := fill(bs, src, dev, &o, w); err != nil {
		return nil, err
	}
	for _, b := range bs {
		if b.t, err = runtime.TensorOn(b.buf, b.off, b.dtype, b.shape); err != nil {
			return nil, fmt.Errorf("%s: tensor %s: %w", where, b.name, err)
		}
	}
	old := make([]*runtime.Tensor, len(bs))
	for i, b := range bs {
		old[i] = b.p.Peek()
		if err := b.p.Bind(b.t); err != nil {
			for j := 0; j < i; j++ {
				if old[j] != nil {
					_ = bs[j].p.Bind(old[j])
				}
			}
			return nil, fmt.Errorf("%s: %w", where, err)
		}
	}
	return w, nil
}

// plan looks the parameter's tensor up and checks it.
func plan(p *nn.Parameter, src Source, where string, o *options) (*binding, error) {
	name := p.Name()
	info, err := src.Info(name)
	if err != nil {
		if strings.Contains(err.Error(), name) {
			return nil, err
		}
		return nil, fmt.Errorf("%s: tensor %s: %w", where, name, err)
	}
	shape := runtime.Shape(info.Shape)
	cur := p.Peek()
	if want, ok := o.shapes[name]; ok && o.shapes != nil {
		if !shape.Equal(want) {
			return nil, fmt.Errorf("%s: tensor %s has shape %v, %s implies %v", where, name, shape, o.shapesBy, want)
		}
	} else if cur != nil && !shape.Equal(cur.Shape()) {
		return nil, fmt.Errorf("%s: tensor %s has shape %v, the model's parameter has %v", where, name, shape, cur.Shape())
	}
	if o.dtypeOK != nil && !o.dtypeOK(info.DType) {
		return nil, fmt.Errorf("%s: tensor %s has dtype %v; %s", where, name, info.DType, o.dtypeWhy)
	}
	if cur != nil && cur.DType() != info.DType {
		return nil, fmt.Errorf("%s: tensor %s has dtype %v, the model's parameter holds %v", where, name, info.DType, cur.DType())
	}
	if info.DType.Size() == 0 {
		return nil, fmt.Errorf("%s: tensor %s has an invalid dtype %v", where, name, info.DType)
	}
	if err := shape.Validate(); err != nil {
		return nil, fmt.Errorf("%s: tensor %s: %w", where, name, err)
	}
	size := int64(shape.NumElements() * info.DType.Size())
	if info.Size != size {
		return nil, fmt.Errorf("%s: tensor %s: %v %v needs %d bytes, the source has %d", where, name, info.DType, shape, size, info.Size)
	}
	return &binding{p: p, name: name, dtype: info.DType, shape: shape, size: size}, nil
}

// fill gives every binding a device buffer holding its bytes, recording each
// buffer in w as soon as it exists.
func fill(bs []*binding, src Source, dev runtime.Device, o *options, w *Weights) error {
	take := func(b *binding, buf *runtime.DeviceBuffer) {
		b.buf = buf
		w.bufs = append(w.bufs, buf)
		w.bytes += buf.Size()
	}
	alloc := func(b *binding) error {
		buf, err := dev.Alloc(b.size, b.name)
		if err != nil {
			return fmt.Errorf("loading %s onto %s: %w", b.name, dev.Name(), err)
		}
		take(b, buf)
		return nil
	}
	if s, ok := dev.(runtime.StoragelessDevice); ok && s.Storageless() {
		for _, b := range bs {
			if err := alloc(b); err != nil {
				return err
			}
		}
		return nil
	}
	if hm, ok := dev.(runtime.HostMemoryDevice); ok {
		mapped, _ := src.(Mapped)
		for _, b := range bs {
			if err := fillHost(b, src, mapped, hm, take, alloc); err != nil {
				return err
			}
		}
		return nil
	}
	for _, g := range packGroups(bs) {
		var total int64
		for _, b := range g {
			b.off = total
			total += b.size
		}
		label := g[0].name
		if len(g) > 1 {
			label = fmt.Sprintf("%s and %d packed siblings", g[0].name, len(g)-1)
		}
		buf, err := dev.Alloc(total, label)
		if err != nil {
			return fmt.Errorf("loading %s onto %s: %w", label, dev.Name(), err)
		}
		w.bufs = append(w.bufs, buf)
		w.bytes += buf.Size()
		for _, b := range g {
			b.buf = buf
		}
	}
	pieces := make([]Piece, len(bs))
	for i, b := range bs {
		name := b.name
		pieces[i] = Piece{Dst: b.buf, Off: b.off, Size: b.size, Name: name,
			Read: func(p []byte, off int64) error { return src.ReadAt(name, p, off) }}
	}
	stream := dev.Compute()
	if o.hasStream {
		stream = o.stream
	}
	st := NewStager(dev, o.stager)
	defer st.Free()
	if err := st.Upload(stream, pieces); err != nil {
		return fmt.Errorf("loading weights onto %s: %w", dev.Name(), err)
	}
	return nil
}

// packAlign is the alignment of each tensor in a packed device buffer.
const packAlign = 256

// packGroups splits bs (in parameter order) into runs of siblings: the
// parameters of the modules under one parent module (by qualified name:
// "model.layers.0.self_attn.q_proj.weight" belongs to
// "model.layers.0.self_attn"), consecutive in bs. Each run gets one device
// buffer, its tensors back to back without padding: a tensor joins the run
// before it only while that run's bytes are a multiple of packAlign, so
// every tensor starts packAlign-aligned and the device holds exactly the
// tensors' bytes. A layer's q, k and v (and gate and up) projections are
// then adjacent in device memory where no bias lies between them, and a
// backend can run them as one GEMM (kernels.MergedMatMuler).
func packGroups(bs []*binding) [][]*binding {
	parent := func(name string) string {
		for range 2 {
			i := strings.LastIndexByte(name, '.')
			if i < 0 {
				return ""
			}
			name = name[:i]
		}
		return name
	}
	var out [][]*binding
	var end int64 // the bytes of the last run
	for i, b := range bs {
		if i > 0 && end%packAlign == 0 && parent(b.name) != "" && parent(b.name) == parent(bs[i-1].name) {
			out[len(out)-1] = append(out[len(out)-1], b)
			end += b.size
			continue
		}
		out = append(out, []*binding{b})
		end = b.size
	}
	return out
}

// fillHost places one tensor on a host-memory device: wrapped in place when
// the source maps it aligned to its dtype, else copied into device memory.
func fillHost(b *binding, src Source, mapped Mapped, dev runtime.HostMemoryDevice,
	take func(*binding, *runtime.DeviceBuffer), alloc func(*binding) error) error {
	if mapped != nil {
		data, err := mapped.Bytes(b.name)
		if err != nil {
			return err
		}
		if int64(len(data)) != b.size {
			return fmt.Errorf("%s: tensor %s: the mapping has %d bytes, want %d", Describe(src), b.name, len(data), b.size)
		}
		if len(data) == 0 || uintptr(unsafe.Pointer(unsafe.SliceData(data)))%uintptr(b.dtype.Size()) == 0 {
			buf, err := dev.Wrap(data, b.name)
			if err != nil {
				return fmt.Errorf("loading %s onto %s: %w", b.name, dev.Name(), err)
			}
			take(b, buf)
			return nil
		}
		// Misaligned in the file: copied, so typed views stay aligned.
		if err := alloc(b); err != nil {
			return err
		}
		copy(b.buf.Bytes(), data)
		return nil
	}
	if err := alloc(b); err != nil {
		return err
	}
	if int64(len(b.buf.Bytes())) != b.size {
		return fmt.Errorf("loading %s onto %s: the device's buffer is not host-addressable", b.name, dev.Name())
	}
	if err := src.ReadAt(b.name, b.buf.Bytes(), 0); err != nil {
		return err
	}
	return nil
}
