//go:build cuda

package cudabackend

import (
	"os"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// L2 prefetch inside the latency-bound kernels (kernels.L2Aheader,
// kernels/cuda/prefetch_ahead.cu): with a region set, RMSNorm of one F32
// row launches rmsnorm_f32in_bf16_ahead and the contiguous one-sequence
// decode attention attn_decode_pipe_d128_s{3,2}w4h1t_ahead_bf16, the
// plain kernels with the region's lines asked of L2 at their start, before
// their dependent-launch wait. Same values, same launch count.

// l2AheadDefault is FT_L2_AHEAD=1's budget (Llama-3-8B shape on the H200,
// 50 MB of L2): decode attention runs ~7 µs in the graph (~28 MB of HBM
// time at 4 TB/s), each RMSNorm ~2-3 µs; o's lines are read by its GEMV
// before the norm after it asks for gate·up's.
var l2AheadDefault = kernels.L2AheadBudget{O: 24 << 20, QKV: 8 << 20, MLP: 8 << 20}

// l2AheadFromEnv is New's reading of FT_L2_AHEAD (off unless set).
func l2AheadFromEnv() (kernels.L2AheadBudget, bool, error) {
	return kernels.ParseL2AheadBudget(os.Getenv("FT_L2_AHEAD"), l2AheadDefault)
}

// l2AheadNormBlocks is how many blocks of rmsnorm_f32in_bf16_ahead only
// prefetch: about 16 lines a thread at the norm's block size, at least 1,
// at most 16.
func l2AheadNormBlocks(bytes int64, threads int) int {
	lines := bytes >> 7
	per := int64(threads) * 16
	return int(max(1, min(16, (lines+per-1)/per)))
}

// l2Ahead is the region set by SetL2Ahead.
type l2Ahead struct {
	p     [2]uintptr
	n     [2]int64
	count int
}

// bytes is the region's total size.
func (a l2Ahead) bytes() int64 { return a.n[0] + a.n[1] }

// args are the five trailing arguments of the _ahead kernels.
func (a l2Ahead) args(last bool) []uint64 {
	l := 0
	if last {
		l = 1
	}
	return []uint64{cuda.Ptr(a.p[0]), cuda.I64(a.n[0]), cuda.Ptr(a.p[1]), cuda.I64(a.n[1]), cuda.I32(l)}
}

// L2AheadBudget is the budget the decoder follows (kernels.L2Aheader).
func (b *Backend) L2AheadBudget() kernels.L2AheadBudget { return b.L2Ahead }

// SetL2Ahead sets (or, with no regions, clears) the region the next
// RMSNorm or decode attention launches prefetch (kernels.L2Aheader).
func (b *Backend) SetL2Ahead(rs ...kernels.L2Region) error {
	b.ahead = l2Ahead{}
	if err := kernels.CheckL2Regions(b.dev, rs); err != nil {
		return err
	}
	for _, r := range rs {
		if r.Bytes >= 128 { // the kernels ask for whole lines only
			b.ahead.p[b.ahead.count], b.ahead.n[b.ahead.count] = r.T.Ptr(), r.Bytes
			b.ahead.count++
		}
	}
	return nil
}

// trAheadNames maps a transposed variant's name to its _ahead twin's kernel.
var trAheadNames = map[string]string{
	"s3w4h1t": "attn_decode_pipe_d128_s3w4h1t_ahead_bf16",
	"s2w4h1t": "attn_decode_pipe_d128_s2w4h1t_ahead_bf16",
}

// aheadKernels are the _ahead twins.
type aheadKernels struct {
	rmsF32 *cuda.Function
	tr     map[string]*cuda.Function // by variant name
}

// loadAhead looks them up.
func loadAhead(get func(string) *cuda.Function) aheadKernels {
	k := aheadKernels{rmsF32: get("rmsnorm_f32in_bf16_ahead"), tr: map[string]*cuda.Function{}}
	for v, n := range trAheadNames {
		k.tr[v] = get(n)
	}
	return k
}

// functions are the kernels, for dependent launch (each calls
// ft_pdl_wait before it reads what an earlier kernel writes).
func (k aheadKernels) functions() []*cuda.Function {
	fs := []*cuda.Function{k.rmsF32}
	for _, f := range k.tr {
		fs = append(fs, f)
	}
	return fs
}

var _ kernels.L2Aheader = (*Backend)(nil)

// sizeShared gives each attention twin its variant's dynamic shared memory
// limit (sizeWave's maxSmem); a twin whose variant is not compiled or
// whose limit the driver refuses is dropped (the plain kernel runs).
func (k *aheadKernels) sizeShared(pipe map[pipeVariant]*pipeKernels) {
	for name, f := range k.tr {
		ok := false
		for v, pk := range pipe {
			if v.Name() == name && v.D == 128 && pk.maxSmem > 0 && f != nil {
				ok = f.SetMaxDynamicSharedMemory(pk.maxSmem) == nil
			}
		}
		if !ok {
			delete(k.tr, name)
		}
	}
}
