//go:build cuda

package cudabackend

import (
	"strconv"

	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// Split-K one-token BF16 GEMVs (FT_GEMV=bal2, bal4, or bal: the split per
// product; off by default;
// kernels/cuda/gemvpipe_bal.cu): twins of the pipelined q/k/v,
// gate·up·SiLU, residual-adding (o, down) and fp32-output (LM head) GEMVs
// that cut each row into S segments of K/S columns, a warp's work unit, so
// that the last round of units over the persistent warps is nearly full
// (q/k/v's 6,144 rows are 1.45 rows a warp with whole rows). A block adds
// each row's S partial sums in a fixed order after its loop: the results
// are deterministic but not the pipelined kernels' bits (fp32 rounding).

// loadGEMVBal looks the split-K GEMVs up as twins of ks's gemv.cu
// kernels (by segments a row).
func (ks *kernelSet) loadGEMVBal(get func(string) *cuda.Function) {
	ks.gemvPipe.bal = map[int]map[*cuda.Function]*cuda.Function{}
	for _, S := range gemvBalSplits {
		n := strconv.Itoa(S)
		ks.gemvPipe.bal[S] = map[*cuda.Function]*cuda.Function{
			ks.gemv3:          get("gemv3_bal" + n + "_bf16"),
			ks.gateUp:         get("gemv_gateup_silu_bal" + n + "_bf16"),
			ks.gemvAcc:        get("gemv_persist_bal" + n + "_f32acc"),
			ks.gemvPersistF32: get("gemv_persist_bal" + n + "_f32out"),
		}
	}
}

// gemvBalMaxSmem caps a split-K launch's dynamic shared memory (the
// partial sums); a product that would need more runs on the pipelined
// kernels.
const gemvBalMaxSmem = 16 << 10

// gemvBalPlan is the launch of f's split-K twin for N rows of width D with
// b.GEMVBal segments a row: the kernel, its grid (blocks of 256 threads)
// and dynamic shared memory. ok is false where none applies: the switch
// is off, f has no twin, D is not a multiple of 8·S, or the partial sums
// would not fit gemvBalMaxSmem.
func (b *Backend) gemvBalPlan(f *cuda.Function, N, D int) (bf *cuda.Function, grid, smem int, ok bool) {
	S := b.GEMVBal
	if S == gemvBalAuto {
		S = b.gemvBalAutoSplit(f, N, D)
	}
	if S <= 1 || N <= 0 || D <= 0 || D%(8*S) != 0 {
		return nil, 0, 0, false
	}
	if bf = b.k.gemvPipe.bal[S][f]; bf == nil {
		return nil, 0, 0, false
	}
	units := N * S
	grid = max(1, min(b.k.persistBlocks[bf], (units+7)/8))
	steps := (units + grid*8 - 1) / (grid * 8)
	R := 1
	if f == b.k.gateUp {
		R = 2
	}
	smem = 8 * steps * R * 4
	if smem > gemvBalMaxSmem {
		return nil, 0, 0, false
	}
	return bf, grid, smem, true
}

// gemvBalAutoSplit is the split FT_GEMV=bal gives N rows of width D: the
// S of gemvBalSplits (or 1, none) that puts the fewest rows' worth of
// units on the busiest warp, ceil(N·S / warps) / S, taken only where it
// beats whole rows by at least 5% and the width allows it (D % (8·S) ==
// 0), the smaller S on a tie. On an H200 (4,224 warp slots) that is 2
// for q/k/v (1.5 rows against 2) and gate·up (3.5 against 4), 1 for
// o/down (4,096 rows: a warp streams one row however they are cut) and
// the LM head (30.5 against 31).
func (b *Backend) gemvBalAutoSplit(f *cuda.Function, N, D int) int {
	best, bestCost := 1, 0.0
	for _, S := range gemvBalSplits {
		bf := b.k.gemvPipe.bal[S][f]
		if bf == nil || D%(8*S) != 0 {
			continue
		}
		W := max(1, b.k.persistBlocks[bf]*8)
		cost := float64((N*S+W-1)/W) / float64(S)
		if best == 1 {
			whole := float64((N + W - 1) / W)
			if cost <= 0.95*whole {
				best, bestCost = S, cost
			}
		} else if cost < bestCost {
			best, bestCost = S, cost
		}
	}
	return best
}

// gemvBal launches f's split-K twin (gemvBalPlan) for N rows of width D
// with f's arguments; launched is false (and nothing enqueued) where
// none applies, and the caller launches f's usual kernel.
func (b *Backend) gemvBal(f *cuda.Function, N, D int, bytes int64, args ...uint64) (launched bool, err error) {
	bf, grid, smem, ok := b.gemvBalPlan(f, N, D)
	if !ok {
		return false, nil
	}
	return true, bf.LaunchBytes(b.s, bytes, cuda.Dim3{X: grid}, cuda.Dim3{X: 256}, smem, args...)
}
