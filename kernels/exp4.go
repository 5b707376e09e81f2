package kernels

import (
	"fmt"

	"github.com/flextensor-go/flextensor/kernels/exp4"
	"github.com/flextensor-go/flextensor/runtime"
)

// Exp4Unpacker is a backend that decodes exp4-packed words (kernels/exp4:
// BF16 weights in 12 bits a word, lossless) on its device, enqueued on a
// stream of that device: the offload engine unpacks each streamed unit
// on the copy stream right after its smaller copy lands.
type Exp4Unpacker interface {
	// UnpackExp4 enqueues on s: dst[0 : 2·l.Words] = the words packed in
	// src from byte srcOff on (16-byte aligned), laid out as l says
	// (exp4.ReadLayout of its header), bit for bit what exp4.Unpack gives.
	// The two ranges must not overlap.
	UnpackExp4(s runtime.Stream, dst, src *runtime.DeviceBuffer, srcOff int64, l exp4.Layout) error
}

// CheckUnpackExp4 is the argument check every Exp4Unpacker runs first:
// the buffers against the layout.
func CheckUnpackExp4(dst, src *runtime.DeviceBuffer, srcOff int64, l exp4.Layout) error {
	if dst == nil || src == nil {
		return fmt.Errorf("UnpackExp4: nil buffer")
	}
	if srcOff < 0 || srcOff%16 != 0 || src.Size()-srcOff < l.Size {
		return fmt.Errorf("UnpackExp4: packed bytes at %d of a %d-byte buffer, its layout needs %d from a 16-byte boundary", srcOff, src.Size(), l.Size)
	}
	if dst.Size() < 2*l.Words {
		return fmt.Errorf("UnpackExp4: output of %d bytes for %d words", dst.Size(), l.Words)
	}
	if dst == src && srcOff < 2*l.Words {
		return fmt.Errorf("UnpackExp4: packed bytes at %d overlap the %d output bytes", srcOff, 2*l.Words)
	}
	return nil
}

// UnpackExp4 is the CPU backend's Exp4Unpacker: exp4.Unpack on the
// buffers' host memory, in s's order (runtime.HostWork).
func (b *CPUBackend) UnpackExp4(s runtime.Stream, dst, src *runtime.DeviceBuffer, srcOff int64, l exp4.Layout) error {
	if err := CheckUnpackExp4(dst, src, srcOff, l); err != nil {
		return err
	}
	hw, ok := s.(runtime.HostWork)
	if !ok {
		return fmt.Errorf("UnpackExp4: stream %T is not a CPU device's", s)
	}
	return hw.Enqueue(func() error { return exp4.Unpack(dst.Bytes(), src.Bytes()[srcOff:srcOff+l.Size]) })
}
