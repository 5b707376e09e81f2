//go:build cuda

package cudabackend

import (
	"math"
	"os"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// One token's decode attention fused with the o_proj that adds into the
// residual (kernels.AttnOProjer; kernels/cuda/attnoproj.cu, issue 21):
// every block starts its share of W_o streaming into shared memory, then
// computes its KV head's attention, then its rows' partial products; the
// last block of each row chunk adds the KV heads' partials into y in a
// fixed order. Backend.AttnOProjFused turns it on (FT_ATTN_OPROJ=1); off,
// or for operands it does not take, the op declines and the decoder runs
// Attention and MatMulAdd.

// attnOProjSmemMax is the dynamic shared memory a block may ask for (the
// H200's 227 KiB less the kernel's static shared memory and a margin).
const attnOProjSmemMax = 227*1024 - 1024

// attnOProjFromEnv parses the switches (attnoprojmode.go).
func attnOProjFromEnv() (attnOProjConfig, error) {
	return parseAttnOProj(os.Getenv("FT_ATTN_OPROJ"), os.Getenv("FT_ATTN_OPROJ_MAXCTX"), os.Getenv("FT_ATTN_OPROJ_PREROWS"))
}

// loadAttnOProj gets the kernels, by query heads per KV head.
func loadAttnOProj(get func(string) *cuda.Function) map[int]*cuda.Function {
	fs := map[int]*cuda.Function{}
	for G, name := range attnOProjKernels {
		fs[G] = get(name)
	}
	return fs
}

// ensureAttnOProjScratch returns the partials' scratch (at least bytes)
// and the chunks' counters (chunks ints, zero), grown as the attention's
// partials are (a buffer a captured graph uses is retired, not freed).
func (b *Backend) ensureAttnOProjScratch(bytes int64, chunks int) (part, cnt uintptr, err error) {
	if b.aoPart == nil || b.aoPart.Size() < bytes {
		if b.aoPart != nil {
			b.retired = append(b.retired, b.aoPart)
			b.aoPart = nil
		}
		buf, err := b.dev.Alloc(max(bytes, 1<<16), "attention + o_proj partials")
		if err != nil {
			return 0, 0, err
		}
		b.aoPart = buf
	}
	if b.aoCnt == nil || b.aoCnt.Size() < int64(4*chunks) {
		if b.aoCnt != nil {
			b.retired = append(b.retired, b.aoCnt)
			b.aoCnt = nil
		}
		size := max(int64(4*chunks), 1024)
		buf, err := b.dev.Alloc(size, "attention + o_proj counters")
		if err != nil {
			return 0, 0, err
		}
		// Zeroed through the aux stream, synchronously (the kernel leaves
		// the counters 0).
		if err := b.aux.Upload(buf.Ptr(), make([]byte, size)); err != nil {
			buf.Free()
			return 0, 0, err
		}
		b.aoCnt = buf
	}
	return b.aoPart.Ptr(), b.aoCnt.Ptr(), nil
}

// AttnOProj: y[1,N] += Attention(q[1,H,128] at pos0 over kCache, vCache
// [C,K,128])·wo[N,H·128]ᵀ in one attn_oproj_g{G}_bf16 launch
// (kernels.AttnOProjer). It declines (false, nothing enqueued) unless
// AttnOProjFused is set and: one token, head width 128, H/K one of 1, 2,
// 4, 8, BF16 q, caches and wo (16-byte aligned), an F32 y of N values,
// a cache capacity C ≤ AttnOProjMaxCtx with pos0 < C, and the shared
// memory fits. Captured into a graph, the position comes from the step
// buffer; the grid and shared memory depend on C alone, so the graph holds
// at every position below C.
func (b *Backend) AttnOProj(y, q, kCache, vCache, wo *runtime.Tensor, pos0 int) (bool, error) {
	if !b.AttnOProjFused || y == nil || q == nil || kCache == nil || vCache == nil || wo == nil {
		return false, nil
	}
	for _, t := range []*runtime.Tensor{y, q, kCache, vCache, wo} {
		if !b.here(t) {
			return false, nil
		}
	}
	if q.DType() != runtime.BF16 || kCache.DType() != runtime.BF16 || vCache.DType() != runtime.BF16 || wo.DType() != runtime.BF16 ||
		y.DType() != runtime.F32 {
		return false, nil
	}
	qs, cs, ws := q.Shape(), kCache.Shape(), wo.Shape()
	if len(qs) != 3 || len(cs) != 3 || len(ws) != 2 || !cs.Equal(vCache.Shape()) || qs[0] != 1 || qs[2] != 128 || cs[2] != 128 {
		return false, nil
	}
	H, C, K, N := qs[1], cs[0], cs[1], ws[0]
	if K == 0 || H%K != 0 || ws[1] != H*128 || y.NumElements() != N || N == 0 {
		return false, nil
	}
	G := H / K
	f := b.k.attnOProj[G]
	if f == nil || C > b.AttnOProjMaxCtx || pos0 < 0 || pos0 >= C || !aligned16(q.Ptr(), kCache.Ptr(), vCache.Ptr(), wo.Ptr()) || y.Ptr()%4 != 0 {
		return false, nil
	}
	chunks, rpc := attnOProjGrid(N, K, b.sms)
	base := attnOProjSmem(G, 0, C)
	if base > attnOProjSmemMax {
		return false, nil
	}
	pre := min(b.AttnOProjPreRows, rpc, (attnOProjSmemMax-base)/(G*256))
	smem := attnOProjSmem(G, pre, C)
	part, cnt, err := b.ensureAttnOProjScratch(int64(K)*int64(N)*4, chunks)
	if err != nil {
		return false, err
	}
	if b.aoSmemSet == nil {
		b.aoSmemSet = map[int]int{}
	}
	if b.aoSmemSet[G] == 0 {
		// A device with less shared memory a block refuses: decline there.
		b.aoSmemSet[G] = 1
		if f.SetMaxDynamicSharedMemory(attnOProjSmemMax) != nil {
			b.aoSmemSet[G] = -1
		}
	}
	if b.aoSmemSet[G] < 0 {
		return false, nil
	}
	scale := float32(math.Log2E / math.Sqrt(128))
	posp, p0 := b.posArgs(pos0)
	// W_o once, the keys and values of the positions once (the other
	// chunks' reads hit L2), the partials written and read, y read and written.
	bytes := int64(N)*int64(H)*128*2 + 2*int64(pos0+1)*int64(K)*128*2 + 2*int64(K)*int64(N)*4 + 2*int64(N)*4
	return true, f.LaunchBytes(b.s, bytes, cuda.Dim3{X: K, Y: chunks}, cuda.Dim3{X: 256}, smem,
		cuda.Ptr(y.Ptr()), cuda.Ptr(part), cuda.Ptr(cnt), cuda.Ptr(q.Ptr()), cuda.Ptr(kCache.Ptr()), cuda.Ptr(vCache.Ptr()),
		cuda.Ptr(wo.Ptr()), cuda.I32(H), cuda.I32(K), cuda.I32(N), cuda.I32(rpc), cuda.I32(pre), cuda.I32(C), posp, p0, cuda.F32(scale))
}

var _ kernels.AttnOProjer = (*Backend)(nil)
