package runtime

import (
	"fmt"
	"unsafe"
)

// Tensor is a small struct: dtype, shape, the buffer it reads and its byte
// offset there. Tensors are contiguous and row-major; views share their buffer.
type Tensor struct {
	dtype  DType
	shape  Shape
	buf    *DeviceBuffer
	offset int64
}

// NewTensor allocates a tensor on dev; label names the allocation in errors.
// A nil dev is an error.
func NewTensor(dev Device, dt DType, shape Shape, label string) (*Tensor, error) {
	if dev == nil {
		return nil, fmt.Errorf("tensor %q: nil device", label)
	}
	if err := shape.Validate(); err != nil {
		return nil, fmt.Errorf("tensor %q: %w", label, err)
	}
	if dt.Size() == 0 {
		return nil, fmt.Errorf("tensor %q: invalid dtype %v", label, dt)
	}
	buf, err := dev.Alloc(int64(shape.NumElements()*dt.Size()), label)
	if err != nil {
		return nil, err
	}
	return &Tensor{dtype: dt, shape: shape.Clone(), buf: buf}, nil
}

// TensorOn makes a tensor over bytes [offset, offset+size) of buf; it fails
// when they do not fit.
func TensorOn(buf *DeviceBuffer, offset int64, dt DType, shape Shape) (*Tensor, error) {
	if buf == nil {
		return nil, fmt.Errorf("tensor %v %v: nil buffer", dt, shape)
	}
	if err := shape.Validate(); err != nil {
		return nil, err
	}
	n := int64(shape.NumElements() * dt.Size())
	if err := CheckRange(fmt.Sprintf("tensor %v %v on %q", dt, shape, buf.Label()), offset, n, buf.Size()); err != nil {
		return nil, err
	}
	return &Tensor{dtype: dt, shape: shape.Clone(), buf: buf, offset: offset}, nil
}

// DType is the element type.
func (t *Tensor) DType() DType { return t.dtype }

// Shape is the tensor's shape; do not modify it.
func (t *Tensor) Shape() Shape { return t.shape }

// Dim is the extent of dimension i (negative counts from the end).
func (t *Tensor) Dim(i int) int {
	if i < 0 {
		i += len(t.shape)
	}
	return t.shape[i]
}

// NumElements is the number of elements.
func (t *Tensor) NumElements() int { return t.shape.NumElements() }

// NumBytes is the tensor's size in bytes.
func (t *Tensor) NumBytes() int64 { return int64(t.NumElements() * t.dtype.Size()) }

// Buffer is the memory the tensor reads.
func (t *Tensor) Buffer() *DeviceBuffer { return t.buf }

// Offset is the tensor's byte offset in its buffer.
func (t *Tensor) Offset() int64 { return t.offset }

// Device is the device of the tensor's buffer.
func (t *Tensor) Device() Device { return t.buf.Device() }

// Ptr is the device address of the first element on a GPU (0 elsewhere).
func (t *Tensor) Ptr() uintptr {
	if t.buf.Ptr() == 0 {
		return 0
	}
	return t.buf.Ptr() + uintptr(t.offset)
}

// Reshape returns a view with another shape of the same element count.
func (t *Tensor) Reshape(shape ...int) (*Tensor, error) {
	s := Shape(shape)
	if s.NumElements() != t.NumElements() {
		return nil, fmt.Errorf("reshape %v to %v: element counts differ", t.shape, s)
	}
	return &Tensor{dtype: t.dtype, shape: s.Clone(), buf: t.buf, offset: t.offset}, nil
}

// Slice returns rows [from, to) of the outermost dimension as a view.
func (t *Tensor) Slice(from, to int) (*Tensor, error) {
	if len(t.shape) == 0 || from < 0 || to < from || to > t.shape[0] {
		return nil, fmt.Errorf("slice [%d:%d] of a tensor of shape %v", from, to, t.shape)
	}
	row := int64(t.shape[1:].NumElements() * t.dtype.Size())
	s := append(Shape{to - from}, t.shape[1:]...)
	return &Tensor{dtype: t.dtype, shape: s, buf: t.buf, offset: t.offset + int64(from)*row}, nil
}

// Bytes is the tensor's memory on host-addressable devices; nil elsewhere.
func (t *Tensor) Bytes() []byte {
	d := t.buf.Bytes()
	if d == nil {
		return nil
	}
	return d[t.offset : t.offset+t.NumBytes()]
}

// F32 views an F32 tensor's memory as float32 (host-addressable devices).
func (t *Tensor) F32() []float32 {
	b := t.Bytes()
	if t.dtype != F32 || len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}

// U16 views a BF16 or F16 tensor's memory as its 16-bit patterns.
func (t *Tensor) U16() []uint16 {
	b := t.Bytes()
	if (t.dtype != BF16 && t.dtype != F16) || len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), len(b)/2)
}

// I32 views an I32 tensor's memory as int32.
func (t *Tensor) I32() []int32 {
	b := t.Bytes()
	if t.dtype != I32 || len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*int32)(unsafe.Pointer(&b[0])), len(b)/4)
}

// String describes the tensor without its data.
func (t *Tensor) String() string {
	return fmt.Sprintf("Tensor(%v %v on %s)", t.dtype, t.shape, deviceName(t.buf.Device()))
}

// BytesAsF32 reinterprets little-endian bytes as float32 values (no copy).
// The slice must be 4-byte aligned, as Go and mmap allocations are.
func BytesAsF32(b []byte) []float32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}

// BytesAsU16 reinterprets little-endian bytes as uint16 values (no copy).
func BytesAsU16(b []byte) []uint16 {
	if len(b) < 2 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), len(b)/2)
}
