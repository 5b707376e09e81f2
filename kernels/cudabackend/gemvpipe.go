//go:build cuda

package cudabackend

import (
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// Software-pipelined one-token BF16 GEMVs (FT_GEMV=pipe, the default;
// kernels/cuda/gemvpipe.cu): twins of gemv3_bf16 (q/k/v),
// gemv_gateup_silu_bf16, gemv_persist_f32acc (o and down into the
// residual) and gemv_persist_f32out (the LM head) that issue a warp's next
// batch of weight loads (the next batch of the row or the first of its next
// row) before computing the current one. Same arguments, same grid rule
// (persistent warps, one wave), same bits. "pipe": 4 loads per lane and
// matrix in flight while a batch is computed (2 per matrix for gate·up),
// at most 64 registers.

// gemvPipeKernels maps each gemv.cu kernel with pipelined twins to its twin
// of each depth.
type gemvPipeKernels struct {
	twin map[string]map[*cuda.Function]*cuda.Function // by depth
	bal  map[int]map[*cuda.Function]*cuda.Function    // split-K twins (gemvbal.go), by segments a row
}

// loadGEMVPipe looks the pipelined GEMVs up (every depth) as twins of ks's
// gemv.cu kernels, which must be loaded.
func (ks *kernelSet) loadGEMVPipe(get func(string) *cuda.Function) {
	ks.gemvPipe.twin = map[string]map[*cuda.Function]*cuda.Function{}
	for _, d := range gemvPipeDepths {
		ks.gemvPipe.twin[d] = map[*cuda.Function]*cuda.Function{
			ks.gemv3:          get("gemv3_" + d + "_bf16"),
			ks.gateUp:         get("gemv_gateup_silu_" + d + "_bf16"),
			ks.gemvAcc:        get("gemv_persist_" + d + "_f32acc"),
			ks.gemvPersistF32: get("gemv_persist_" + d + "_f32out"),
		}
	}
	ks.loadGEMVBal(get)
}

// functions are the pipelined GEMVs of every depth and their split-K twins
// (gemvbal.go; all call ft_pdl_wait
// before touching x or y: pdl.go).
func (k *gemvPipeKernels) functions() []*cuda.Function {
	var fs []*cuda.Function
	for _, d := range gemvPipeDepths {
		for _, f := range k.twin[d] {
			if f != nil {
				fs = append(fs, f)
			}
		}
	}
	for _, S := range gemvBalSplits {
		for _, f := range k.bal[S] {
			if f != nil {
				fs = append(fs, f)
			}
		}
	}
	return fs
}

// sizeGEMVPipe records the pipelined GEMVs' and the early twins' resident
// blocks on sms multiprocessors in persistBlocks (their grids follow their
// twins' rule).
func (ks *kernelSet) sizeGEMVPipe(sms int) error {
	for _, f := range append(ks.gemvPipe.functions(), ks.earlyFunctions()...) {
		n, err := f.MaxActiveBlocksPerSM(256, 0)
		if err != nil {
			return err
		}
		ks.persistBlocks[f] = max(1, n) * sms
	}
	return nil
}

// gemvFn is the kernel a one-token product of width D launches in place of
// f: f's pipelined twin of depth b.GEMVPipe where it has one, else f
// (gemv3_bf16 itself under b.GEMVPersistQKV, FT_GEMV=mixed). A
// width below one 8-element chunk (D = 0) stays on f: the pipelined loop
// needs a batch a row (gemvpipe.cu), gemv.cu's kernels write the empty sum.
func (b *Backend) gemvFn(f *cuda.Function, D int) *cuda.Function {
	if b.GEMVPipe == "" || D < 8 || (b.GEMVPersistQKV && f == b.k.gemv3) {
		return b.early(f)
	}
	if t := b.k.gemvPipe.twin[b.GEMVPipe][f]; t != nil {
		return b.early(t)
	}
	return b.early(f)
}
