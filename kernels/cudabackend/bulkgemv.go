//go:build cuda

package cudabackend

import (
	"fmt"
	"os"
	"strconv"
	"sync"

	kcuda "github.com/flextensor-go/flextensor/kernels/cuda"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// Bulk-copy GEMVs (FT_GEMV=bulk; kernels/cuda/sm90a/gemv/gemv_bulk.cu):
// the one-token products of a decode step (q/k/v fused, o and down added
// into the residual, gate·up·SiLU fused, the LM head and any other
// one-token MatMul) with their weights streamed into a shared-memory ring
// by Hopper's bulk-copy engine, the first stages issued before the
// dependent-launch wait. One block of 288 threads per SM. Their outputs are
// the bits of the persistent kernels of gemv.cu (same per-lane order, same
// warp reduction). The module is its own (kcuda.SourceBulkGEMV), compiled
// for sm_90a on compute capability 9.0 only; where it cannot be had the
// products run on gemv.cu's kernels, and FT_TRACE=1 says why.

// Defaults of the ring: the dynamic shared memory of a block (two blocks
// fit on an SM, so the next bulk GEMV's block starts streaming beside the
// one before it) and the bytes a stage aims at.
const (
	bulkSmemDefault  = 112 << 10
	bulkStageDefault = 32 << 10
	bulkThreads      = 288 // 8 consumer warps and the producer warp
	bulkMaxStages    = 8   // FT_BULK_MAXS
	// bulkSmemMax is the most dynamic shared memory a launch asks for: the
	// 227 KiB a block may opt into, less the kernels' 128 bytes of static
	// barriers, rounded down.
	bulkSmemMax = 220 << 10
)

// bulkGEMV is the compiled module, loaded once.
type bulkGEMV struct {
	dev  *cuda.Device
	once sync.Once
	err  error

	bf16, f32out, f32acc, gateUp *cuda.Function
	bwVec, bwBulk                *cuda.Function

	smem, stage int // ring budget and stage target in bytes
}

// bulkSizesFromEnv reads FT_GEMV_BULK_SMEM and FT_GEMV_BULK_STAGE (KiB;
// "" = the defaults).
func bulkSizesFromEnv() (smem, stage int, err error) {
	smem, stage = bulkSmemDefault, bulkStageDefault
	for _, v := range []struct {
		name string
		dst  *int
		max  int
	}{{"FT_GEMV_BULK_SMEM", &smem, bulkSmemMax >> 10}, {"FT_GEMV_BULK_STAGE", &stage, 200}} {
		s := os.Getenv(v.name)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > v.max {
			return 0, 0, fmt.Errorf("%s=%q: want KiB from 1 to %d", v.name, s, v.max)
		}
		*v.dst = n << 10
	}
	return smem, stage, nil
}

// load compiles and loads the module the first time.
func (k *bulkGEMV) load() error {
	k.once.Do(func() {
		k.err = k.loadModule()
		if k.err != nil && os.Getenv("FT_TRACE") == "1" {
			fmt.Fprintf(os.Stderr, "trace: bulk-copy GEMVs unavailable, gemv.cu's kernels run instead: %v\n", k.err)
		}
	})
	return k.err
}

func (k *bulkGEMV) loadModule() error {
	if cc := k.dev.ComputeCapability(); cc != 90 {
		return fmt.Errorf("bulk-copy GEMVs need compute capability 9.0 (sm_90a); %s is %d.%d", k.dev.Name(), cc/10, cc%10)
	}
	smem, stage, err := bulkSizesFromEnv()
	if err != nil {
		return err
	}
	k.smem, k.stage = smem, stage
	mod, err := k.dev.LoadModuleArch("flextensor_gemv_bulk.cu", kcuda.SourceBulkGEMV(), "sm_90a")
	if err != nil {
		return err
	}
	fns := map[string]**cuda.Function{"gemv_bulk_bf16": &k.bf16, "gemv_bulk_f32out": &k.f32out, "gemv_bulk_f32acc": &k.f32acc,
		"gemv_bulk_gateup_silu": &k.gateUp, "bw_read_vec": &k.bwVec, "bw_read_bulk": &k.bwBulk}
	for name, dst := range fns {
		f, err := mod.Function(name)
		if err != nil {
			return err
		}
		if name != "bw_read_vec" {
			if err := f.SetMaxDynamicSharedMemory(bulkSmemMax); err != nil {
				return err
			}
		}
		*dst = f
	}
	// Every GEMV calls ft_pdl_wait before it reads x or touches y (the
	// weights it streams before are no earlier kernel's output).
	for _, f := range []*cuda.Function{k.bf16, k.f32out, k.f32acc, k.gateUp} {
		f.SetDependentLaunch(true)
	}
	return nil
}

// bulkPlan is a launch's ring: R rows a stage, S stages, smem bytes of
// dynamic shared memory, grid blocks.
type bulkPlan struct{ R, S, smem, grid int }

// plan sizes the ring for rows rows of K columns (pair: gate and up rows
// together) over sms SMs; ok is false where not two stages fit.
func (k *bulkGEMV) plan(rows, K int, pair bool, sms int) (bulkPlan, bool) {
	grid := max(1, min(sms, rows))
	rb := 2 * K
	unit := rb
	if pair {
		unit *= 2
	}
	xb := (rb + 127) &^ 127
	perBlock := (rows + grid - 1) / grid
	R := max(1, min(perBlock, k.stage/unit))
	sb := R * unit
	S := min(bulkMaxStages, (k.smem-xb)/sb, (perBlock+R-1)/R)
	if k.smem-xb < 2*unit || S < 1 || sb >= 1<<20 {
		return bulkPlan{}, false
	}
	if S < 2 && perBlock > R {
		return bulkPlan{}, false
	}
	return bulkPlan{R: R, S: S, smem: xb + S*sb, grid: grid}, true
}

// bulkReady reports whether one-token products go through the bulk-copy
// GEMVs: GEMVBulk set and the module loaded.
func (b *Backend) bulkReady() bool {
	return b.GEMVBulk && b.k.bulk != nil && b.k.bulk.load() == nil
}

// bulkMatMul runs out[N] = x·wᵀ for one token (out BF16 or F32) on the
// bulk GEMVs; ran is false where they do not apply (x and w checked by
// MatMul: D % 8 == 0, 16-byte aligned).
func (b *Backend) bulkMatMul(out, x, w *runtime.Tensor, N, D int) (ran bool, err error) {
	if !b.bulkReady() {
		return false, nil
	}
	p, ok := b.k.bulk.plan(N, D, false, b.sms)
	if !ok {
		return false, nil
	}
	k := b.k.bulk
	if out.DType() == runtime.F32 {
		return true, k.f32out.LaunchBytes(b.s, gemvBytes(N, D, out), cuda.Dim3{X: p.grid}, cuda.Dim3{X: bulkThreads}, p.smem,
			cuda.Ptr(out.Ptr()), cuda.Ptr(x.Ptr()), cuda.Ptr(w.Ptr()), cuda.I32(N), cuda.I32(D), cuda.I32(p.R), cuda.I32(p.S))
	}
	return true, k.bf16.LaunchBytes(b.s, gemvBytes(N, D, out), cuda.Dim3{X: p.grid}, cuda.Dim3{X: bulkThreads}, p.smem,
		cuda.Ptr(out.Ptr()), cuda.Ptr(out.Ptr()), cuda.Ptr(out.Ptr()), cuda.Ptr(x.Ptr()), cuda.Ptr(w.Ptr()), cuda.Ptr(w.Ptr()), cuda.Ptr(w.Ptr()),
		cuda.I32(N), cuda.I32(0), cuda.I32(0), cuda.I32(D), cuda.I32(p.R), cuda.I32(p.S))
}

// bulkMatMulAdd runs y[N] += x·wᵀ (y F32) for one token on the bulk GEMVs.
func (b *Backend) bulkMatMulAdd(y, x, w *runtime.Tensor, N, D int) (ran bool, err error) {
	if !b.bulkReady() {
		return false, nil
	}
	p, ok := b.k.bulk.plan(N, D, false, b.sms)
	if !ok {
		return false, nil
	}
	return true, b.k.bulk.f32acc.LaunchBytes(b.s, gemvBytes(N, D, y)+int64(N)*4, cuda.Dim3{X: p.grid}, cuda.Dim3{X: bulkThreads}, p.smem,
		cuda.Ptr(y.Ptr()), cuda.Ptr(x.Ptr()), cuda.Ptr(w.Ptr()), cuda.I32(N), cuda.I32(D), cuda.I32(p.R), cuda.I32(p.S))
}

// bulkMatMul3 runs the q, k and v projections of one token in one launch on
// the bulk GEMVs (MatMulN's checks done).
func (b *Backend) bulkMatMul3(outs []*runtime.Tensor, x *runtime.Tensor, ws []*runtime.Tensor) (ran bool, err error) {
	if !b.bulkReady() {
		return false, nil
	}
	N0, N1, N2, D := ws[0].Dim(0), ws[1].Dim(0), ws[2].Dim(0), x.Dim(-1)
	p, ok := b.k.bulk.plan(N0+N1+N2, D, false, b.sms)
	if !ok {
		return false, nil
	}
	return true, b.k.bulk.bf16.LaunchBytes(b.s, gemvBytes(N0+N1+N2, D, outs[0]), cuda.Dim3{X: p.grid}, cuda.Dim3{X: bulkThreads}, p.smem,
		cuda.Ptr(outs[0].Ptr()), cuda.Ptr(outs[1].Ptr()), cuda.Ptr(outs[2].Ptr()), cuda.Ptr(x.Ptr()),
		cuda.Ptr(ws[0].Ptr()), cuda.Ptr(ws[1].Ptr()), cuda.Ptr(ws[2].Ptr()), cuda.I32(N0), cuda.I32(N1), cuda.I32(N2), cuda.I32(D),
		cuda.I32(p.R), cuda.I32(p.S))
}

// bulkGateUp runs act = silu(x·wgᵀ)·(x·wuᵀ) for one token on the bulk
// GEMVs (GateUpSiLU's checks done).
func (b *Backend) bulkGateUp(out, x, wg, wu *runtime.Tensor, N, D int) (ran bool, err error) {
	if !b.bulkReady() {
		return false, nil
	}
	p, ok := b.k.bulk.plan(N, D, true, b.sms)
	if !ok {
		return false, nil
	}
	return true, b.k.bulk.gateUp.LaunchBytes(b.s, gemvBytes(2*N, D, out)-int64(N)*2, cuda.Dim3{X: p.grid}, cuda.Dim3{X: bulkThreads}, p.smem,
		cuda.Ptr(out.Ptr()), cuda.Ptr(x.Ptr()), cuda.Ptr(wg.Ptr()), cuda.Ptr(wu.Ptr()), cuda.I32(N), cuda.I32(D), cuda.I32(p.R), cuda.I32(p.S))
}

// BulkReadRate measures how fast this GPU reads a buffer of bytes (a
// multiple of 16, at least 16 KiB) on the compute stream, iters times each:
// with 16-byte vector loads (the persistent GEMVs' pattern, grid-stride
// over blocks×SMs blocks of 256 threads, blocks from the occupancy
// calculator) and with bulk copies through a ring of stages of stage bytes
// (one block per SM, as many stages as smem bytes hold). It returns the
// rates in bytes a second. Needs the bulk module (compute capability 9.0).
func (b *Backend) BulkReadRate(bytes int64, iters, stage, smem int) (vec, bulk float64, err error) {
	if b.k.bulk == nil {
		return 0, 0, fmt.Errorf("cudabackend.BulkReadRate: no bulk-copy module")
	}
	if err := b.k.bulk.load(); err != nil {
		return 0, 0, fmt.Errorf("cudabackend.BulkReadRate: %w", err)
	}
	if bytes%16 != 0 || bytes < 16<<10 || iters < 1 || stage%16 != 0 || stage < 1024 || smem > bulkSmemMax || smem/stage < 1 {
		return 0, 0, fmt.Errorf("cudabackend.BulkReadRate: %d bytes (want a multiple of 16, ≥ 16 KiB), %d iterations, stage %d (a multiple of 16, ≥ 1 KiB), smem %d", bytes, iters, stage, smem)
	}
	buf, err := b.dev.Alloc(bytes+16, "read-rate buffer")
	if err != nil {
		return 0, 0, err
	}
	defer buf.Free()
	sink := buf.Ptr() + uintptr(bytes)
	k := b.k.bulk
	perSM, err := k.bwVec.MaxActiveBlocksPerSM(256, 0)
	if err != nil {
		return 0, 0, err
	}
	S := min(bulkMaxStages, smem/stage)
	runs := []func() error{
		func() error {
			return k.bwVec.Launch(b.s, cuda.Dim3{X: max(1, perSM) * b.sms}, cuda.Dim3{X: 256}, 0,
				cuda.Ptr(buf.Ptr()), cuda.I64(bytes/16), cuda.U32(0x9e3779b9), cuda.Ptr(sink))
		},
		func() error {
			return k.bwBulk.Launch(b.s, cuda.Dim3{X: b.sms}, cuda.Dim3{X: bulkThreads}, S*stage,
				cuda.Ptr(buf.Ptr()), cuda.I64(bytes), cuda.I32(stage), cuda.I32(S), cuda.U32(0x9e3779b9), cuda.Ptr(sink))
		},
	}
	var rates [2]float64
	for i, run := range runs {
		if err := run(); err != nil { // warm-up
			return 0, 0, err
		}
		start, err := b.s.RecordEvent()
		if err != nil {
			return 0, 0, err
		}
		for range iters {
			if err := run(); err != nil {
				return 0, 0, err
			}
		}
		end, err := b.s.RecordEvent()
		if err != nil {
			return 0, 0, err
		}
		if err := end.Synchronize(); err != nil {
			return 0, 0, err
		}
		d, err := end.ElapsedSince(start)
		if err != nil {
			return 0, 0, err
		}
		rates[i] = float64(bytes) * float64(iters) / d.Seconds()
	}
	return rates[0], rates[1], nil
}

// bulkFromEnv reports whether FT_GEMV=bulk asks for the bulk-copy GEMVs,
// and checks FT_GEMV_BULK_SMEM and FT_GEMV_BULK_STAGE.
func bulkFromEnv() (bool, error) {
	if _, _, err := bulkSizesFromEnv(); err != nil {
		return false, err
	}
	return os.Getenv("FT_GEMV") == "bulk", nil
}
