//go:build cuda

package cudabackend

import (
	"fmt"
	"os"
	"sync"

	"github.com/flextensor-go/flextensor/kernels"
	kcuda "github.com/flextensor-go/flextensor/kernels/cuda"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// A plain layer's one-token step as one persistent kernel
// (kernels.DecodeLayerer; kernels/cuda/decodelayer.cu's decode_layer_bf16):
// one block of 512 threads a multiprocessor, all resident at once, the
// norms, the q/k/v GEMV, RoPE, the KV append, attention, o_proj, the
// gate·up·SiLU GEMV and down_proj as phases between grid barriers, each
// block prefetching its share of the next phase's weights into shared
// memory (one thread's bulk copies, cp.async.bulk completing on an
// mbarrier) before it waits. Backend.DecodeMega turns it on
// (FT_DECODE_MEGA=1); off by default (measured slower on the H200, s11f:
// 156.5 µs a layer against 129.8 for the separate kernels).
//
// The grid barrier needs every block of the grid resident at once, and
// the launch is an ordinary one, which does not promise that: the grid is
// the occupancy query's blocks a multiprocessor × the device's
// multiprocessor count, which holds only when the whole GPU is this
// context's. Under MPS with an active-thread (SM) limit, in a green
// context, or beside work that keeps multiprocessors busy for good, the
// kernel can wait at its first barrier for ever. A cooperative launch
// would check residency but runtime/cuda has none (nor a check that graph
// capture takes it).
//
// The kernel is a module of its own (kcuda.SourceDecodeLayer), compiled
// and loaded on the first DecodeLayer call with DecodeMega set (or by New
// under FT_DECODE_MEGA=1, so `FT_DECODE_MEGA=1 infer kernels --out DIR`
// puts it in a kernel cache too): a backend with the switch off neither
// compiles it nor fails on it.

// megaThreads is decode_layer_bf16's block size (DL_THREADS).
const megaThreads = 512

// megaAttnBytes is the kernel's attention scratch in shared memory with g
// query heads per KV head (at most 8) of width 128, f32: q [g·128], k
// [128], (max, sum, rescale) [16 warps·8·2], the warps' merge tree
// [8·g·128], the scores of a tile of 512 positions [g·512] (DL_TP).
func megaAttnBytes(g int) int { return g*128*4 + 128*4 + 16*8*2*4 + 8*g*128*4 + g*512*4 }

// megaSmemMax is the dynamic shared memory a block of the kernel may ask
// for on compute capability 9.0 (227 KiB), less 1 KiB for its static
// shared memory and a margin.
const megaSmemMax = 227*1024 - 1024

// decodeMegaFromEnv is the default of Backend.DecodeMega: FT_DECODE_MEGA
// "1" (checked by checkEnvSwitches: "", "0" or "1").
func decodeMegaFromEnv() bool { return os.Getenv("FT_DECODE_MEGA") == "1" }

// megaModule is decode_layer_bf16's module on one device (kernelSet),
// compiled and loaded once, its dynamic shared memory limit raised to
// megaSmemMax; err says why it could not be had.
type megaModule struct {
	dev  *cuda.Device
	once sync.Once
	fn   *cuda.Function
	err  error
}

// function compiles and loads the module the first time (FT_TRACE=1 says
// so on stderr when that fails) and returns the kernel or why not.
func (m *megaModule) function() (*cuda.Function, error) {
	m.once.Do(func() {
		m.fn, m.err = loadMega(m.dev)
		if m.err != nil && os.Getenv("FT_TRACE") == "1" {
			fmt.Fprintf(os.Stderr, "trace: the one-kernel decode layer (FT_DECODE_MEGA) is not loaded: %v\n", m.err)
		}
	})
	return m.fn, m.err
}

// loadMega compiles SourceDecodeLayer for dev and returns
// decode_layer_bf16, allowed megaSmemMax bytes of dynamic shared memory.
func loadMega(dev *cuda.Device) (*cuda.Function, error) {
	mod, err := dev.LoadModule("flextensor_decodelayer.cu", kcuda.SourceDecodeLayer())
	if err != nil {
		return nil, fmt.Errorf("compiling decodelayer.cu: %w", err)
	}
	f, err := mod.Function("decode_layer_bf16")
	if err != nil {
		return nil, err
	}
	if err := f.SetMaxDynamicSharedMemory(megaSmemMax); err != nil {
		return nil, fmt.Errorf("shared memory limit %d bytes: %w", megaSmemMax, err)
	}
	return f, nil
}

// megaState is the kernel's device memory: the grid barrier's two words
// (zeroed once; the kernel leaves them ready) and the attention partials.
// Neither moves while a graph may use it: a larger partial buffer retires
// the old one. It also keeps the occupancy query's answer for the
// dynamic shared memory last asked for (fixed for a model).
type megaState struct {
	bar, part   *runtime.DeviceBuffer
	occSmem     int     // the dynamic shared memory blocksPerSM is for; 0: not queried
	blocksPerSM int     // decode_layer_bf16's resident blocks a multiprocessor at occSmem
	trace       uintptr // a test's phase trace buffer (megaMarks uint64 a block), or 0
}

// megaMarks is the kernel's timer reads a block in a phase trace (DL_MARKS).
const megaMarks = 16

func (m *megaState) free() {
	m.bar.Free()
	m.part.Free()
	m.bar, m.part = nil, nil
}

// megaShape is what decode_layer_bf16 needs to know of a layer.
type megaShape struct{ D, H, KV, I, C int }

// megaCovers checks a's operands against what the kernel takes and
// returns the shape; ok false: the op declines.
func (b *Backend) megaCovers(a kernels.DecodeLayer) (s megaShape, ok bool) {
	if a.Window != 0 || len(a.InvFreq) != 64 || b.dev.ComputeCapability() != 90 {
		return s, false
	}
	if !b.here(a.X) || a.X.DType() != runtime.F32 {
		return s, false
	}
	for _, t := range []*runtime.Tensor{a.InNorm, a.PostNorm, a.WQ, a.WK, a.WV, a.WO, a.WGate, a.WUp, a.WDown,
		a.KCache, a.VCache, a.Q, a.K, a.V, a.Att, a.Gate} {
		if !b.here(t) || t.DType() != runtime.BF16 || t.Ptr()%16 != 0 {
			return s, false
		}
	}
	if a.X.Ptr()%16 != 0 {
		return s, false
	}
	D := a.X.NumElements()
	qs, ks, vs, os_, gs, us, ds, cs := a.WQ.Shape(), a.WK.Shape(), a.WV.Shape(), a.WO.Shape(), a.WGate.Shape(), a.WUp.Shape(), a.WDown.Shape(), a.KCache.Shape()
	if len(qs) != 2 || len(ks) != 2 || len(vs) != 2 || len(os_) != 2 || len(gs) != 2 || len(us) != 2 || len(ds) != 2 || len(cs) != 3 {
		return s, false
	}
	const d = 128
	if D == 0 || D%8 != 0 || qs[1] != D || ks[1] != D || vs[1] != D || gs[1] != D || us[1] != D || qs[0]%d != 0 || ks[0]%d != 0 ||
		!ks.Equal(vs) || os_[0] != D || os_[1] != qs[0] || !gs.Equal(us) || ds[0] != D || ds[1] != gs[0] || cs[2] != d ||
		!cs.Equal(a.VCache.Shape()) || cs[1] != ks[0]/d {
		return s, false
	}
	H, KV, I, C := qs[0]/d, ks[0]/d, gs[0], cs[0]
	if KV == 0 || H%KV != 0 || H/KV > 8 || I == 0 || I%8 != 0 || a.Pos < 0 || a.Pos >= C ||
		a.InNorm.NumElements() != D || a.PostNorm.NumElements() != D ||
		a.Q.NumElements() < H*d || a.Att.NumElements() < H*d || a.K.NumElements() < KV*d || a.V.NumElements() < KV*d ||
		a.Gate.NumElements() < I {
		return s, false
	}
	return megaShape{D: D, H: H, KV: KV, I: I, C: C}, true
}

// megaSmem is the kernel's dynamic shared memory for s: the prefetch
// buffer (all that is left, a multiple of 16 bytes), the act vector and
// the attention scratch; ok false when the two last do not fit.
func megaSmem(s megaShape) (pf, total int, ok bool) {
	act := max(s.D, s.H*128, s.I) * 2
	act = (act + 15) &^ 15
	attn := megaAttnBytes(s.H / s.KV)
	pf = (megaSmemMax - act - attn) &^ 15
	if pf < 0 {
		return 0, 0, false
	}
	return pf, pf + act + attn, true
}

// megaGrid is decode_layer_bf16's grid at smem bytes of dynamic shared
// memory: the blocks a multiprocessor the occupancy query allows (asked
// once per smem, kept in b.mega) × the device's multiprocessors, all of
// which the grid barrier needs resident at once; 0 when not one block
// fits (FT_TRACE=1 says so on stderr the first time).
func (b *Backend) megaGrid(f *cuda.Function, smem int) (int, error) {
	m := &b.mega
	if m.occSmem != smem {
		n, err := f.MaxActiveBlocksPerSM(megaThreads, smem)
		if err != nil {
			return 0, err
		}
		m.occSmem, m.blocksPerSM = smem, n
		if n < 1 && os.Getenv("FT_TRACE") == "1" {
			fmt.Fprintf(os.Stderr, "trace: the one-kernel decode layer declines: no block of %d threads with %d bytes of shared memory fits on a multiprocessor\n", megaThreads, smem)
		}
	}
	return max(0, m.blocksPerSM) * b.sms, nil
}

// DecodeLayer runs a's step as one decode_layer_bf16 launch
// (kernels.DecodeLayerer). It declines (false, nothing enqueued) unless
// DecodeMega is set, the device has compute capability 9.0 and the
// operands are what the kernel takes: an F32 residual, BF16 weights,
// caches and scratch on this device, 16-byte aligned, head width 128, at
// most 8 query heads per KV head, no sliding window, D and I multiples of
// 8, the position inside the cache. It declines too when the occupancy
// query allows no block of the kernel on a multiprocessor. With DecodeMega
// set, a module that cannot be compiled or loaded, or a failing occupancy
// query, is an error (not a quiet fallback to the separate ops). Stages
// is not filled.
//
// The grid (occupancy × multiprocessors) must be resident all at once for
// its barriers: not for MPS with an SM limit or green contexts, where the
// launch can hang (see the top of decodelayer.go).
func (b *Backend) DecodeLayer(a kernels.DecodeLayer) (bool, error) {
	if !b.DecodeMega {
		return false, nil
	}
	s, ok := b.megaCovers(a)
	if !ok {
		return false, nil
	}
	pf, smem, ok := megaSmem(s)
	if !ok {
		return false, nil
	}
	f, err := b.k.decodeLayer.function()
	if err != nil {
		return false, fmt.Errorf("cudabackend.DecodeLayer (FT_DECODE_MEGA): %w", err)
	}
	m := &b.mega
	grid, err := b.megaGrid(f, smem)
	if err != nil {
		return false, fmt.Errorf("cudabackend.DecodeLayer (FT_DECODE_MEGA): occupancy: %w", err)
	}
	if grid < 1 {
		return false, nil
	}
	if m.bar == nil {
		const size = 256
		buf, err := b.dev.Alloc(size, "decode layer barrier")
		if err != nil {
			return false, err
		}
		if err := b.aux.Upload(buf.Ptr(), make([]byte, size)); err != nil {
			buf.Free()
			return false, err
		}
		m.bar = buf
	}
	partBytes := int64(max(grid, s.KV)) * int64(s.H/s.KV) * 130 * 4
	if m.part == nil || m.part.Size() < partBytes {
		buf, err := b.dev.Alloc(partBytes, "decode layer attention partials")
		if err != nil {
			return false, err
		}
		if m.part != nil {
			b.retired = append(b.retired, m.part) // a captured graph may still read it
		}
		m.part = buf
	}
	tab, err := b.ropeTable(a.InvFreq)
	if err != nil {
		return false, err
	}
	posp, p0 := b.posArgs(a.Pos)
	D, H, KV, I := int64(s.D), int64(s.H), int64(s.KV), int64(s.I)
	bytes := 2*((H+2*KV)*128*D+D*H*128+3*I*D) + 2*2*int64(a.Pos+1)*KV*128
	return true, f.LaunchBytes(b.s, bytes, cuda.Dim3{X: grid}, cuda.Dim3{X: megaThreads}, smem,
		cuda.Ptr(a.X.Ptr()), cuda.Ptr(a.InNorm.Ptr()), cuda.Ptr(a.PostNorm.Ptr()), cuda.F32(a.InEps), cuda.F32(a.PostEps),
		cuda.Ptr(a.WQ.Ptr()), cuda.Ptr(a.WK.Ptr()), cuda.Ptr(a.WV.Ptr()), cuda.Ptr(a.WO.Ptr()),
		cuda.Ptr(a.WGate.Ptr()), cuda.Ptr(a.WUp.Ptr()), cuda.Ptr(a.WDown.Ptr()),
		cuda.Ptr(a.KCache.Ptr()), cuda.Ptr(a.VCache.Ptr()), cuda.Ptr(a.Q.Ptr()), cuda.Ptr(a.K.Ptr()), cuda.Ptr(a.V.Ptr()),
		cuda.Ptr(a.Att.Ptr()), cuda.Ptr(a.Gate.Ptr()), cuda.Ptr(m.part.Ptr()), cuda.Ptr(m.bar.Ptr()), cuda.Ptr(tab),
		cuda.I32(s.D), cuda.I32(s.H), cuda.I32(s.KV), cuda.I32(s.I), cuda.I32(s.C), posp, p0, cuda.I32(pf), cuda.Ptr(m.trace))
}

var _ kernels.DecodeLayerer = (*Backend)(nil)
