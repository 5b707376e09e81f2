//go:build cuda

package cudabackend

import (
	"fmt"

	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// RMSNorm of the fp32 residual stream over many rows (kernels/cuda/normrows.cu):
// rmsnorm_f32in_bf16 and add_rmsnorm_f32_bf16 at a quarter of their block
// size, each thread holding four of their threads' values, so a row is read
// from memory once and four times as many rows are in flight. The results
// are bit for bit those of norm.cu's kernels (same sums in the same order),
// so the switch changes speed only. Backend.NormRows picks when they run.

// normRowsKernels are normrows.cu's kernels, by J-1 (chunks per old thread).
type normRowsKernels struct {
	rms, add, addB16 [2]*cuda.Function
}

func loadNormRows(get func(string) *cuda.Function) normRowsKernels {
	var k normRowsKernels
	for j := range 2 {
		k.rms[j] = get(fmt.Sprintf("rmsnorm_f32in_bf16_rows_j%d", j+1))
		k.add[j] = get(fmt.Sprintf("add_rmsnorm_f32_bf16_rows_j%d", j+1))
		k.addB16[j] = get(fmt.Sprintf("add_rmsnorm_bf16y_rows_j%d", j+1))
	}
	return k
}

// functions are the kernels (all call ft_pdl_wait first).
func (k *normRowsKernels) functions() []*cuda.Function {
	return []*cuda.Function{k.rms[0], k.rms[1], k.add[0], k.add[1], k.addB16[0], k.addB16[1]}
}
