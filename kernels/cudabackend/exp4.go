//go:build cuda

package cudabackend

import (
	"fmt"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/kernels/exp4"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

var _ kernels.Exp4Unpacker = (*Backend)(nil)

// UnpackExp4 enqueues exp4_unpack (kernels/cuda/exp4.cu) on s, a stream of
// the backend's device (the offload engine's copy stream): dst's first
// 2·l.Words bytes from src, packed as l says. dst must be 16-byte aligned.
func (b *Backend) UnpackExp4(s runtime.Stream, dst, src *runtime.DeviceBuffer, srcOff int64, l exp4.Layout) error {
	if err := kernels.CheckUnpackExp4(dst, src, srcOff, l); err != nil {
		return err
	}
	cs, ok := s.(*cuda.Stream)
	if !ok || cs.Device() != b.dev {
		return fmt.Errorf("UnpackExp4: stream %T is not one of %s's", s, b.dev.Name())
	}
	if !aligned16(dst.Ptr(), src.Ptr()) {
		return fmt.Errorf("UnpackExp4: buffers not 16-byte aligned")
	}
	if l.Chunks == 0 {
		return nil
	}
	return b.k.exp4Unpack.Launch(cs, cuda.Dim3{X: int(l.Chunks)}, cuda.Dim3{X: 256}, 0,
		cuda.Ptr(dst.Ptr()), cuda.Ptr(src.Ptr()+uintptr(srcOff)), cuda.I64(l.Words), cuda.I64(l.Lo), cuda.I64(l.Codes), cuda.I64(l.Base),
		cuda.I64(l.EscStart), cuda.I64(l.Esc))
}
