//go:build cuda

package cudabackend

import (
	"fmt"
	"math"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// PackedPrefillAttention is causal attention of packed sequences that all
// start at position 0, over their own packed keys and values k, v [T,K,d]
// (kernels.PackedPrefillAttender; varlencontig.go): one launch of the
// prefill variant's contiguous varlen kernel (wg6's).
// It reports false, doing nothing, unless VarlenContig is on (on unless
// FT_VARLEN_CONTIG=0), LegacyFlash off, the chosen prefill variant
// (FT_PREFILL_VARIANT) has the kernel for head width d (wg6: 64 and
// 128) and the device loaded it (compute capability 9.0),
// every row is 16-byte aligned, and the tiles fit the grid; the caller then
// takes VarlenPrefillAttention over the pool.
func (b *Backend) PackedPrefillAttention(out, q, k, v *runtime.Tensor, qStarts []int32, window int) (bool, error) {
	const op = "PackedPrefillAttention"
	if !b.VarlenContig || b.LegacyFlash || b.noFlash {
		return false, nil
	}
	for _, c := range []struct {
		n string
		t *runtime.Tensor
	}{{"out", out}, {"q", q}, {"k", k}, {"v", v}} {
		if c.t == nil {
			return false, fmt.Errorf("cudabackend.%s: %s is missing", op, c.n)
		}
		if err := b.act(op, c.n, c.t); err != nil {
			return false, err
		}
	}
	T, H, K, d, err := kernels.CheckPackedPrefill("cudabackend."+op, out, q, k, v, qStarts, window)
	if err != nil {
		return false, err
	}
	if !aligned16(out.Ptr(), q.Ptr(), k.Ptr(), v.Ptr()) {
		return false, nil
	}
	vr, err := choosePrefillVariant(b.PrefillVariant, d, true, true)
	if err != nil {
		return false, fmt.Errorf("cudabackend: %w", err)
	}
	name := vr.contigKernel(d)
	if name == "" || !vr.sm90a {
		return false, nil
	}
	f := b.k.prefill.wg[vr.extra].function(name)
	if f == nil {
		return false, nil
	}
	tiles := packedTiles(qStarts, int32(vr.rows))
	nt := len(tiles) / 2
	if nt > 65535 { // past the grid's y extent
		return false, nil
	}
	if T == 0 || nt == 0 {
		return true, nil
	}
	meta := make([]int32, 0, len(tiles)+len(qStarts))
	meta = append(meta, tiles...)
	meta = append(meta, qStarts...)
	base, err := b.uploadMeta(&b.meta.prefill, meta, "packed prefill attention tables")
	if err != nil {
		return true, err
	}
	startsP := base + uintptr(4*len(tiles))
	scale := float32(math.Log2E / math.Sqrt(float64(d)))
	// Heads in x, tiles (longest first) in y, as varlenFlash.
	return true, f.Launch(b.s, cuda.Dim3{X: H, Y: nt}, cuda.Dim3{X: vr.threads}, vr.smem(d),
		cuda.Ptr(out.Ptr()), cuda.Ptr(q.Ptr()), cuda.Ptr(k.Ptr()), cuda.Ptr(v.Ptr()), cuda.I32(H), cuda.I32(K),
		cuda.Ptr(base), cuda.Ptr(startsP), cuda.F32(scale), cuda.I32(window))
}

var _ kernels.PackedPrefillAttender = (*Backend)(nil)
