//go:build cuda

package cudabackend

import (
	"fmt"
	"math/bits"
	"os"
	"sync"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// FP8 W8A16 GEMVs at HBM speed and the vectorized dequantization
// (kernels/cuda/fp8gemv.cu): gemv_fp8_v (one weight, bf16 or f32 out),
// gemv3_fp8 (q, k, v in one launch) and gemv_gateup_silu_fp8 (gate·up·SiLU
// in one launch) stream the FP8 rows with 16-byte loads, in one of several
// tunings (fp8Variants: kernel names end in the variant's name; picked per
// launch by kind and width, fp8AutoPick, or forced by FT_FP8_VARIANT); dequant_fp8_bf16_v16 feeds the cuBLAS prefill.
//
// They take per-channel scales and block scales with a power-of-two block
// of at least 16 (128 in the published checkpoints); other block sizes,
// widths that are not a multiple of 16 and misaligned tensors run the
// fp8.cu kernels (gemv_fp8, dequant_fp8_bf16).
//
// Switches: Backend.LegacyFP8GEMV (FT_FP8_GEMV=legacy when the backend is
// made) runs the fp8.cu kernels, one launch per projection, for A/B runs;
// Backend.FP8Variant (FT_FP8_VARIANT; "auto" by default) picks the tuning.

// fp8Kernels are fp8gemv.cu's kernels and their launch geometry.
type fp8Kernels struct {
	variants map[string]*fp8GEMVs // the GEMVs of each tuning variant (fp8Variants)
	dequant  *cuda.Function
	sms      int
	cc       int // the device's compute capability (major·10 + minor)

	mu   sync.Mutex
	smem map[*cuda.Function]int      // the dynamic shared memory each kernel may take (set so far)
	wave map[fp8WaveKey]int          // blocks of 256 threads resident on the GPU at once
	bad  map[*cuda.Function]struct{} // kernels whose shared-memory limit could not be raised
}

type fp8WaveKey struct {
	f    *cuda.Function
	smem int
}

// fp8GEMVs are the three one-token FP8 GEMVs of one tuning variant.
type fp8GEMVs struct {
	gemv, gemv3, gateUp *cuda.Function
	// gemv3Norm, gateUpNorm: the twins of gemv3 and gateUp with the
	// RMSNorm in front of them folded in (fp8normgemv.go); the tensor-core
	// variants only, nil for the others.
	gemv3Norm, gateUpNorm *cuda.Function
	rows                  int    // rows per warp at a time (R)
	smemX                 bool   // x in shared memory as fp32 (K·4 bytes), else read from global memory
	mma                   bool   // fp8gemvmma.cu: a block a tile of 16 rows, x as f16 in shared memory (~K·2 bytes)
	persistNB             int    // fm_persist's k-steps in flight (fp8PersistNB); 0: a block a tile
	fallback              string // the variant run where a persistent one does not take K (fp8PersistNB)
}

// loadFP8 looks fp8gemv.cu's kernels up in the compiled module.
func loadFP8(get func(string) *cuda.Function) *fp8Kernels {
	k := &fp8Kernels{variants: map[string]*fp8GEMVs{}, dequant: get("dequant_fp8_bf16_v16"),
		smem: map[*cuda.Function]int{}, wave: map[fp8WaveKey]int{}, bad: map[*cuda.Function]struct{}{}}
	for _, v := range fp8Variants {
		g := &fp8GEMVs{gemv: get("gemv_fp8_v_" + v.Name), gemv3: get("gemv3_fp8_" + v.Name),
			gateUp: get("gemv_gateup_silu_fp8_" + v.Name), rows: v.R, smemX: v.SmemX, mma: v.MMA}
		if v.MMA {
			g.gemv3Norm, g.gateUpNorm = get("gemv3_fp8_norm_"+v.Name), get("gemv_gateup_silu_fp8_norm_"+v.Name)
		}
		if p, ok := fp8PersistNB[v.Name]; ok {
			g.persistNB, g.fallback = p.NB, p.Fallback
		}
		k.variants[v.Name] = g
	}
	return k
}

// functions are the GEMV kernels of every variant (all call ft_pdl_wait
// first: pdl.go).
func (k *fp8Kernels) functions() []*cuda.Function {
	var fs []*cuda.Function
	for _, v := range fp8Variants {
		g := k.variants[v.Name]
		fs = append(fs, g.gemv, g.gemv3, g.gateUp)
		if g.mma {
			fs = append(fs, g.gemv3Norm, g.gateUpNorm)
		}
	}
	return fs
}

// fp8GEMVs is the variant of the FP8 GEMVs that b runs for a GEMV of kind
// over x of K columns with scale blocks of block (0 per channel):
// fp8VariantFor(b.FP8Variant, kind, K) (fp8variant.go; "auto", the
// default, picks per kind and K, a variant's name forces it), and where
// that is a tensor-core variant that does not take the block size or the
// device (fp8MMATakes), fp8ScalarPick's.
func (b *Backend) fp8GEMVs(kind fp8Kind, K, block int) *fp8GEMVs {
	vs := b.k.fp8.variants
	name := fp8VariantFor(b.FP8Variant, kind, K)
	if (b.FP8Variant == "" || b.FP8Variant == fp8AutoVariant) && fp8PersistOn(b.FP8Persist, kind) {
		if twin := fp8PersistTwin(name); twin != "" {
			name = twin
		}
	}
	g, ok := vs[name]
	if !ok {
		return vs[fp8FixedDefault]
	}
	if g.mma && !fp8MMATakes(block, b.k.fp8.cc) {
		return vs[fp8ScalarPick(kind, K)]
	}
	if g.persistNB > 0 && !fp8PersistTakes(g.persistNB, K) {
		return vs[g.fallback]
	}
	return g
}

// fn is v's kernel of kind.
func (v *fp8GEMVs) fn(kind fp8Kind) *cuda.Function {
	switch kind {
	case fp8KindQKV:
		return v.gemv3
	case fp8KindGateUp:
		return v.gateUp
	}
	return v.gemv
}

// legacyFP8FromEnv is the default of Backend.LegacyFP8GEMV.
func legacyFP8FromEnv() bool { return os.Getenv("FT_FP8_GEMV") == "legacy" }

// fp8Shift is the kernels' bshift argument for a block size: −1 per
// channel, log2(B)−4 for a power of two B ≥ 16; ok is false otherwise.
func fp8Shift(block int) (shift int, ok bool) {
	switch {
	case block == 0:
		return -1, true
	case block >= 16 && block&(block-1) == 0:
		return bits.TrailingZeros(uint(block)) - 4, true
	}
	return 0, false
}

// fp8Grid is the launch of f (a kernel of v) over rows rows with x of K
// columns: the dynamic shared memory (K·4 bytes where v holds x in shared
// memory, else 0) and a grid in which every warp takes the same number of
// groups of v.rows rows (at most one wave of resident blocks). ok is false
// when the device cannot give f that much shared memory.
//
// A tensor-core variant (v.mma) takes a block of 256 threads a tile of 16
// rows (gate·up: 8 of each matrix) and x as f16 in shared memory, ~K·2
// bytes.
func (k *fp8Kernels) fp8Grid(v *fp8GEMVs, f *cuda.Function, rows, K int) (grid, smem int, ok bool, err error) {
	if v.smemX {
		smem = 4 * K
	}
	if v.mma {
		smem = 2048 * ((K + 1023) / 1024) // 8 warps × 16 uint4 × ⌈⌈K/128⌉/8⌉ (fm_body)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if smem > 48<<10 && k.smem[f] < smem {
		if _, failed := k.bad[f]; failed {
			return 0, 0, false, nil
		}
		if err := f.SetMaxDynamicSharedMemory(smem); err != nil {
			k.bad[f] = struct{}{} // past the device's limit: the fp8.cu kernels take it
			return 0, 0, false, nil
		}
		k.smem[f] = smem
	}
	key := fp8WaveKey{f, smem}
	wave, seen := k.wave[key]
	if !seen {
		n, err := f.MaxActiveBlocksPerSM(256, smem)
		if err != nil {
			return 0, 0, false, err
		}
		if n == 0 {
			k.bad[f] = struct{}{}
			return 0, 0, false, nil
		}
		wave = n * k.sms
		k.wave[key] = wave
	}
	if v.mma {
		if rows <= 0 {
			return 0, 0, false, nil
		}
		tile := 16
		if f == v.gateUp || f == v.gateUpNorm {
			tile = 8 // 8 rows of gate and the same of up
		}
		tiles := (rows + tile - 1) / tile
		if v.persistNB > 0 {
			return min(tiles, wave), smem, true, nil // one wave, each block looping over its tiles
		}
		return tiles, smem, true, nil
	}
	groups := (rows + v.rows - 1) / v.rows
	if groups <= 0 { // nothing to compute: the unfused path returns at once
		return 0, 0, false, nil
	}
	perWarp := (groups + 8*wave - 1) / (8 * wave)
	warps := (groups + perWarp - 1) / perWarp
	return (warps + 7) / 8, smem, true, nil
}

// fp8Fast reports whether the fp8gemv.cu GEMVs take one token of width D
// with these scales: the switch is off, D % 16 == 0, a block size they
// take, the tensors 16-byte aligned.
func (b *Backend) fp8Fast(D int, layout kernels.FP8Layout, ptrs ...uintptr) (shift int, ok bool) {
	if b.LegacyFP8GEMV || D%16 != 0 || !aligned16(ptrs...) {
		return 0, false
	}
	return fp8Shift(layout.Block)
}

// fp8Stride is the row stride of a block layout's scales (0 per channel).
func fp8Stride(D int, layout kernels.FP8Layout) int {
	if layout.Block > 0 {
		return (D + layout.Block - 1) / layout.Block
	}
	return 0
}

// gemvFP8V runs out[N] = x[D]·dequant(w, scale)ᵀ through gemv_fp8_v for one
// token, out BF16 or F32 (with add, out F32: out[N] += the product);
// handled is false (nothing launched) where the kernel does not take the
// shape, and the caller runs another path. The arguments are checked by
// the caller (MatMulFP8, MatMulAddFP8).
func (b *Backend) gemvFP8V(out, x, w, scale *runtime.Tensor, layout kernels.FP8Layout, add bool) (handled bool, err error) {
	N, D := w.Dim(0), w.Dim(1)
	shift, ok := b.fp8Fast(D, layout, x.Ptr(), w.Ptr())
	if !ok {
		return false, nil
	}
	v := b.fp8GEMVs(fp8KindGEMV, D, layout.Block)
	f := v.gemv
	grid, smem, ok, err := b.k.fp8.fp8Grid(v, f, N, D)
	if !ok || err != nil {
		return false, err
	}
	outF32 := fp8OutMode(out, add)
	bytes := int64(N)*int64(D) + scale.NumBytes() + int64(D)*2 + int64(N)*int64(out.DType().Size())
	if add {
		bytes += int64(N) * 4 // y read as well as written
	}
	return true, f.LaunchBytes(b.s, bytes, cuda.Dim3{X: grid}, cuda.Dim3{X: 256}, smem,
		cuda.Ptr(out.Ptr()), cuda.I32(outF32), cuda.Ptr(x.Ptr()), cuda.Ptr(w.Ptr()), cuda.Ptr(scale.Ptr()), cuda.I32(int(scale.DType())),
		cuda.I32(N), cuda.I32(D), cuda.I32(shift), cuda.I32(fp8Stride(D, layout)))
}

// dequantFP8 writes dequant(w, scale) as BF16 [N,D] into dst (16-byte
// aligned): dequant_fp8_bf16_v16 where it applies, else dequant_fp8_bf16.
func (b *Backend) dequantFP8(dst uintptr, w, scale *runtime.Tensor, layout kernels.FP8Layout) error {
	N, D := w.Dim(0), w.Dim(1)
	blk, sstride, sdt := layout.Block, fp8Stride(D, layout), int(scale.DType())
	n := int64(N) * int64(D)
	if !b.LegacyFP8GEMV && D%16 == 0 && blk%16 == 0 && n/16 < 1<<31 && aligned16(dst, w.Ptr()) {
		chunks := n / 16
		return b.k.fp8.dequant.LaunchBytes(b.s, n*3+scale.NumBytes(), cuda.Dim3{X: b.gridFor(chunks)}, cuda.Dim3{X: 256}, 0,
			cuda.Ptr(dst), cuda.Ptr(w.Ptr()), cuda.Ptr(scale.Ptr()), cuda.I32(sdt),
			cuda.I32(N), cuda.I32(D), cuda.I32(blk), cuda.I32(sstride))
	}
	return b.k.dequantFP8.LaunchBytes(b.s, n*3+scale.NumBytes(), cuda.Dim3{X: b.gridFor(n)}, cuda.Dim3{X: 256}, 0,
		cuda.Ptr(dst), cuda.Ptr(w.Ptr()), cuda.Ptr(scale.Ptr()), cuda.I32(sdt),
		cuda.I32(N), cuda.I32(D), cuda.I32(blk), cuda.I32(sstride))
}

// checkFP8Weight validates one FP8 weight and its scales on this device.
func (b *Backend) checkFP8Weight(op string, w, scale *runtime.Tensor, layout kernels.FP8Layout) error {
	if err := b.onDevice(op, "w", w); err != nil {
		return err
	}
	if err := b.onDevice(op, "scale", scale); err != nil {
		return err
	}
	if err := kernels.CheckFP8(w, scale, layout); err != nil {
		return err
	}
	if w.DType() != runtime.F8E4M3 {
		return fmt.Errorf("cudabackend.%s: weight %v is %v; the CUDA kernels take F8_E4M3", op, w.Shape(), w.DType())
	}
	return nil
}

var (
	_ kernels.FP8MultiMatMuler = (*Backend)(nil)
	_ kernels.FP8GateUpSiLUer  = (*Backend)(nil)
	_ kernels.FP8RowsFuser     = (*Backend)(nil)
)

// matMulFP8LtRows runs outs[i] = x·dequant(ws[i])ᵀ for x of several rows
// through matMulFP8LtN (x quantized once) when every product has the shape
// MatMulFP8 accepts and BF16 or F32 outputs; ran is false, with nothing
// enqueued, otherwise (one token, a mismatch MatMulFP8 will report, a
// path the FP8 GEMM does not take). The weights are checked by the
// caller.
func (b *Backend) matMulFP8LtRows(op string, outs []*runtime.Tensor, x *runtime.Tensor, ws, scales []*runtime.Tensor, layout kernels.FP8Layout) (bool, error) {
	D := x.Dim(-1)
	if D == 0 || x.NumElements()%D != 0 {
		return false, nil
	}
	T := x.NumElements() / D
	if T < 2 {
		return false, nil
	}
	for i, w := range ws {
		if err := b.onDevice(op, "out", outs[i]); err != nil {
			return false, err
		}
		if w.Dim(1) != D || outs[i].NumElements() != T*w.Dim(0) || (outs[i].DType() != runtime.BF16 && outs[i].DType() != runtime.F32) {
			return false, nil
		}
	}
	return b.matMulFP8LtN(outs, x, ws, scales, layout, T, D)
}

// MatMulNFP8 is kernels.FP8MultiMatMuler on the GPU: three FP8 projections
// of one token (q, k, v) with BF16 outputs and scales of one dtype run as
// one gemv3_fp8 launch; several tokens that take the FP8 tensor cores
// quantize x once for all the GEMMs (matMulFP8LtRows); anything else runs
// as MatMulFP8s.
func (b *Backend) MatMulNFP8(outs []*runtime.Tensor, x *runtime.Tensor, ws, scales []*runtime.Tensor, layout kernels.FP8Layout) error {
	if len(outs) != len(ws) || len(scales) != len(ws) {
		return fmt.Errorf("cudabackend.MatMulNFP8: %d outputs and %d scales for %d weights", len(outs), len(scales), len(ws))
	}
	if err := b.act("MatMulNFP8", "x", x); err != nil {
		return err
	}
	D := x.Dim(-1)
	fused := len(ws) == 3 && x.NumElements() == D
	ptrs := []uintptr{x.Ptr()}
	for i := range ws {
		if err := b.checkFP8Weight("MatMulNFP8", ws[i], scales[i], layout); err != nil {
			return err
		}
		if err := b.onDevice("MatMulNFP8", "out", outs[i]); err != nil {
			return err
		}
		fused = fused && ws[i].Dim(1) == D && outs[i].DType() == runtime.BF16 && outs[i].NumElements() == ws[i].Dim(0) &&
			scales[i].DType() == scales[0].DType()
		ptrs = append(ptrs, ws[i].Ptr())
	}
	var shift, grid, smem int
	v := b.fp8GEMVs(fp8KindQKV, D, layout.Block)
	if fused {
		shift, fused = b.fp8Fast(D, layout, ptrs...)
	}
	if fused {
		var err error
		if grid, smem, fused, err = b.k.fp8.fp8Grid(v, v.gemv3, ws[0].Dim(0)+ws[1].Dim(0)+ws[2].Dim(0), D); err != nil {
			return err
		}
	}
	if !fused {
		if ran, err := b.matMulFP8LtRows("MatMulNFP8", outs, x, ws, scales, layout); ran || err != nil {
			return err
		}
		for i := range ws {
			if err := b.MatMulFP8(outs[i], x, ws[i], scales[i], layout); err != nil {
				return err
			}
		}
		return nil
	}
	N0, N1, N2 := ws[0].Dim(0), ws[1].Dim(0), ws[2].Dim(0)
	bytes := int64(N0+N1+N2)*int64(D+2) + scales[0].NumBytes() + scales[1].NumBytes() + scales[2].NumBytes() + int64(D)*2
	return v.gemv3.LaunchBytes(b.s, bytes, cuda.Dim3{X: grid}, cuda.Dim3{X: 256}, smem,
		cuda.Ptr(outs[0].Ptr()), cuda.Ptr(outs[1].Ptr()), cuda.Ptr(outs[2].Ptr()), cuda.Ptr(x.Ptr()),
		cuda.Ptr(ws[0].Ptr()), cuda.Ptr(ws[1].Ptr()), cuda.Ptr(ws[2].Ptr()),
		cuda.Ptr(scales[0].Ptr()), cuda.Ptr(scales[1].Ptr()), cuda.Ptr(scales[2].Ptr()), cuda.I32(int(scales[0].DType())),
		cuda.I32(N0), cuda.I32(N1), cuda.I32(N2), cuda.I32(D), cuda.I32(shift), cuda.I32(fp8Stride(D, layout)))
}

// GateUpSiLUFP8 is kernels.FP8GateUpSiLUer on the GPU: one
// gemv_gateup_silu_fp8 launch where it applies; for several tokens on the
// FP8 tensor cores, x quantized once for both GEMMs (matMulFP8LtRows), then
// SiLUMul; else gate into out, up into up and SiLUMul.
func (b *Backend) GateUpSiLUFP8(out, up, x, wg, wu, sg, su *runtime.Tensor, layout kernels.FP8Layout) error {
	if err := b.act("GateUpSiLUFP8", "x", x); err != nil {
		return err
	}
	if err := b.act("GateUpSiLUFP8", "out", out); err != nil {
		return err
	}
	for _, p := range []struct {
		w, s *runtime.Tensor
	}{{wg, sg}, {wu, su}} {
		if err := b.checkFP8Weight("GateUpSiLUFP8", p.w, p.s, layout); err != nil {
			return err
		}
	}
	D := x.Dim(-1)
	if D <= 0 || !wg.Shape().Equal(wu.Shape()) || wg.Dim(1) != D || x.NumElements()%D != 0 || out.NumElements() != x.NumElements()/D*wg.Dim(0) {
		return fmt.Errorf("cudabackend.GateUpSiLUFP8: x %v, weights %v / %v, out %v: want rows of width D, [I,D] weights and out [T,I]",
			x.Shape(), wg.Shape(), wu.Shape(), out.Shape())
	}
	N := wg.Dim(0)
	fused := x.NumElements() == D && sg.DType() == su.DType()
	var shift, grid, smem int
	v := b.fp8GEMVs(fp8KindGateUp, D, layout.Block)
	if fused {
		shift, fused = b.fp8Fast(D, layout, x.Ptr(), wg.Ptr(), wu.Ptr())
	}
	if fused {
		var err error
		if grid, smem, fused, err = b.k.fp8.fp8Grid(v, v.gateUp, N, D); err != nil {
			return err
		}
	}
	if !fused {
		ran, err := b.matMulFP8LtRows("GateUpSiLUFP8", []*runtime.Tensor{out, up}, x, []*runtime.Tensor{wg, wu}, []*runtime.Tensor{sg, su}, layout)
		if err != nil {
			return err
		}
		if ran {
			return b.SiLUMul(out, out, up)
		}
		if err := b.MatMulFP8(out, x, wg, sg, layout); err != nil {
			return err
		}
		if err := b.MatMulFP8(up, x, wu, su, layout); err != nil {
			return err
		}
		return b.SiLUMul(out, out, up)
	}
	bytes := 2*int64(N)*int64(D) + sg.NumBytes() + su.NumBytes() + int64(D)*2 + int64(N)*2
	return v.gateUp.LaunchBytes(b.s, bytes, cuda.Dim3{X: grid}, cuda.Dim3{X: 256}, smem,
		cuda.Ptr(out.Ptr()), cuda.Ptr(x.Ptr()), cuda.Ptr(wg.Ptr()), cuda.Ptr(wu.Ptr()), cuda.Ptr(sg.Ptr()), cuda.Ptr(su.Ptr()),
		cuda.I32(int(sg.DType())), cuda.I32(N), cuda.I32(D), cuda.I32(shift), cuda.I32(fp8Stride(D, layout)))
}
