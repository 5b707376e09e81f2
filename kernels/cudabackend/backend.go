//go:build cuda

package cudabackend

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"sync"
	"unsafe"

	"github.com/flextensor-go/flextensor/kernels"
	kcuda "github.com/flextensor-go/flextensor/kernels/cuda"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// Backend runs kernels.Backend's ops on one GPU's compute stream. Activations
// are BF16 (MatMul may also write F32); weights must be BF16. It is not safe
// for concurrent use (like the CPU backend, it keeps scratch buffers).
type Backend struct {
	dev  *cuda.Device
	s    *cuda.Stream
	aux  *cuda.Stream // synchronous uploads, legal while s is being captured
	blas *cuda.BLAS
	k    *kernelSet
	sms  int

	// Graph capture: while capturing, ops read the step's position and ids
	// from step ([0] = position, [1:] = ids), which SetStep writes; it never
	// moves once made, so captured graphs stay valid.
	capturing bool
	step      *runtime.DeviceBuffer

	ids      *runtime.DeviceBuffer // eager Embedding ids
	stage    *runtime.HostBuffer   // pinned staging of the ids
	stageEv  *cuda.Event           // completes when the last copy from stage has run
	rope     *runtime.DeviceBuffer // the rotary inverse-frequency table on the device
	ropeFor  []float32             // the host table rope holds
	part     *runtime.DeviceBuffer // attention partial results
	argOut   *runtime.DeviceBuffer
	argSplit *runtime.DeviceBuffer // argmax_rows_split's counters, then its partials (ArgmaxRows)
	argRows  int                   // the counters at argSplit's start (rows of the largest call)
	deq      *runtime.DeviceBuffer // an FP8 weight dequantized to bf16 for a cuBLAS prefill (MatMulFP8)
	// retired buffers are kept until Close: graphs captured earlier may
	// still read them.
	retired []*runtime.DeviceBuffer

	// noFlash routes every attention through the split kernel (tests).
	noFlash bool

	// meta holds the per-call int32 inputs of the paged ops on the device.
	meta pagedMeta
	// sampleMeta holds SampleRows' temperatures and draws (sample.go).
	sampleMeta metaUpload
	moe        moeMeta // the MoE row ops' tables (moe.go)

	// GEMVRowBlocks selects the row-block GEMV kernels for one-token MatMuls
	// instead of the persistent one-warp-per-row kernel (faster on the H200:
	// 3.98 against 3.48 TB/s on Llama-3-8B's down projection); GEMVUnroll (4,
	// 8 or 16 loads in flight per lane; 0 = 8 for bf16 outputs, 16 for fp32)
	// and GEMVWarpsPerRow (1, 2, 4 or 8; 0 = chosen per shape) tune them.
	// Benchmarks and tests set these; FT_GEMV=rowblocks sets GEMVRowBlocks
	// when the backend is made (A/B runs).
	GEMVRowBlocks               bool
	GEMVUnroll, GEMVWarpsPerRow int
	// GEMVPipe runs the one-token q/k/v, gate·up·SiLU, residual-adding and
	// fp32-output GEMVs on their software-pipelined twins (gemvpipe.go):
	// "pipe" (the depth), "" for gemv.cu's kernels. New sets it to "pipe"
	// (the default, also FT_GEMV=pipe), and to "" when FT_GEMV is persist or
	// rowblocks.
	GEMVPipe string
	// GEMVPersistQKV keeps the one-token q/k/v (MatMulN's gemv3_bf16) on
	// gemv.cu's kernel while GEMVPipe runs the other GEMVs pipelined (it
	// does not touch GEMVBal's split-K twins). New sets it for
	// FT_GEMV=mixed, and for FT_GEMV unset when gemvMixedDefault is true
	// (gemvmixedmode.go; true: the default since the s8e step A/B).
	GEMVPersistQKV bool
	// GEMVBal, when 2 or 4, runs those one-token GEMVs on their split-K
	// twins (gemvbal.go) with each row cut into GEMVBal segments, where
	// the width allows (else on the GEMVPipe kernels); 1 picks the split
	// per product (gemvBalAutoSplit). New sets it from FT_GEMV=bal2, bal4
	// or bal (A/B runs); 0, off, by default.
	GEMVBal int

	// LegacyDecodeAttention runs one-query decode attention (Attention at
	// one token, PagedDecodeAttention) through the staged decode kernels and
	// a separate combine launch instead of the tensor-core kernels of
	// decode_mma.cu. New sets it when FT_DECODE_ATTN=legacy (A/B runs).
	LegacyDecodeAttention bool
	// DecodeSplitPositions is how many cache positions one block of the
	// staged one-sequence decode attention walks (0: 64); FT_DECODE_SPLIT
	// sets it when the backend is made (A/B runs).
	DecodeSplitPositions int
	// ForceMMADecode uses the tensor-core decode attention for one sequence
	// also with 8 query heads per KV head, where the staged kernel is the
	// default (tests).
	ForceMMADecode bool
	// NoDecodePipe runs the tensor-core decode attention through the
	// single-buffered kernels (attn_*decode_mma_*) instead of the pipelined
	// ones (attn_*decode_pipe_*, decode_pipe.cu). New sets it when
	// FT_DECODE_PIPE=0 (A/B runs).
	NoDecodePipe bool
	// DecodePipeChunk is the fewest visible positions per split of the
	// pipelined decode attention (0: pipeChunkDefault, 256); FT_DECODE_CHUNK sets it when the
	// backend is made (A/B runs).
	DecodePipeChunk int
	// DecodePipeVariant names the compiled variant of the pipelined decode
	// attention at head width 128 (decode.go's pipeVariants, e.g. "s3w4h1r";
	// "" = the default); FT_DECODE_VARIANT sets it when the backend is made
	// (A/B runs).
	DecodePipeVariant string
	// DecodePipeSplits fixes the grid's splits per (query row, KV head
	// block) of the pipelined decode attention (0: chosen from the shape);
	// FT_DECODE_SPLITS sets it when the backend is made (A/B runs).
	DecodePipeSplits int
	counters         *runtime.DeviceBuffer // the decode kernels' last-block counters (decode.go)

	// NoFusedAddNorm makes AddRMSNorm run Add then RMSNorm (two launches)
	// instead of add_rmsnorm_f32_bf16. New sets it when FT_FUSE_ADDNORM=0.
	NoFusedAddNorm bool

	// LegacyFlash runs prefill attention (contiguous and varlen) through the
	// 64-row flash kernels of attention.cu and paged.cu and RoPE + KV store
	// through the scalar kernels, instead of prefill.cu's kernels and the
	// vectorised RoPE + store (prefill.go). New sets it when
	// FT_FLASH=legacy (A/B runs).
	LegacyFlash bool

	// PrefillVariant picks the layout of the tensor-core prefill attention
	// (prefillvariant.go): "" or "auto" for the measured default, or one of "base",
	// "w4m32", "w8q", "m64", "fa2", "wg" for every call it applies to. New sets it from
	// FT_PREFILL_VARIANT (A/B runs); an unknown value fails the launch.
	PrefillVariant string

	// LegacyFP8GEMV runs FP8 weights through fp8.cu's kernels (gemv_fp8
	// per projection, dequant_fp8_bf16) instead of fp8gemv.cu's. New sets
	// it when FT_FP8_GEMV=legacy (A/B runs).
	LegacyFP8GEMV bool

	// NoFP8Add turns off the residual-adding one-token FP8 GEMV
	// (fp8add.go: AddsFP8 false), so that a decoder layer's FP8 o_proj
	// and down_proj write their products and separate adds put them into
	// the residual stream. New sets it when FT_FP8_ADD=0 (A/B runs).
	NoFP8Add bool

	// FP8Variant names the tuning of the FP8 GEMVs: "auto" (the default:
	// a variant per launch by kind and width, fp8variant.go's fp8AutoPick)
	// or one of fp8Variants run everywhere; an unknown name runs u8r1s.
	// New sets it from FT_FP8_VARIANT (A/B runs).
	FP8Variant string

	// FP8GEMM is how MatMulFP8 multiplies FP8 weights with per-channel
	// scales for FP8GEMMMinTokens tokens or more (0: 16): on the FP8
	// tensor cores with cuBLASLt (the default) or dequantized to BF16
	// (fp8gemm.go). New sets them from FT_FP8_GEMM and
	// FT_FP8_GEMM_MIN_TOKENS.
	FP8GEMM          FP8GEMMMode
	FP8GEMMMinTokens int
	// FP8LtRescale applies the FP8 GEMM's token and channel scales with
	// the fp8_rescale kernel even where cuBLASLt could apply them itself
	// (outer-vector scales: sm_90, cuBLASLt 12.9+). New sets it when
	// FT_FP8_GEMM_SCALES=rescale (A/B runs; tests).
	FP8LtRescale bool
	// NoFP8Fuse turns the fused FP8 MLP of a prefill off (FusesFP8MLP
	// says no: gate and up rescaled, SiLUMul, the down projection's input
	// quantized apart, as before fp8mlp.go). New sets it when
	// FT_FP8_FUSE=0 (A/B runs).
	NoFP8Fuse bool
	fp8lt     fp8Lt

	// GEMM is how MatMul and MatMulAdd of several tokens (and the
	// dequantized FP8 prefill) run their BF16 GEMMs: tuned per shape over
	// cuBLASLt's algorithms and cublasGemmEx (the default) or cublasGemmEx
	// alone (gemm.go). New sets it from FT_GEMM.
	GEMM GEMMMode
	// NoFusedNorm makes the kernels.NormProjector ops decline, so that
	// callers run RMSNorm and the plain GEMVs (normgemv.go). New sets it
	// unless FT_FUSE_NORM=1: folding measured slower on the H200.
	NoFusedNorm bool
	// NoFP8FusedNorm makes the kernels.FP8NormProjector ops decline
	// (fp8normgemv.go): the decoder then runs RMSNorm and the FP8 GEMVs.
	// New sets it for FT_FP8_FUSE_NORM=0.
	NoFP8FusedNorm bool
	// FP8Persist asks the auto-picked tensor-core FP8 GEMVs for their
	// persistent forms (mp2, mp4; fp8variant.go's fp8PersistOn): "" or
	// "all" (the default) for every kind, "gateup" for gate·up·SiLU only,
	// "none" for no kind. New sets it from FT_FP8_PERSIST (A/B runs).
	FP8Persist string
	// NoFusedRoPE makes ProjectRoPEStoreKV decline (qkvrope.go): the
	// decoder then runs the q/k/v GEMV and rope_store_bf16. New sets it
	// unless FT_FUSE_ROPE=1 (measured slower on the H200).
	NoFusedRoPE bool
	// NoDecodeCluster keeps one-token decode attention over short caches
	// off the cluster twins (cluster.go): the pipelined kernel's global
	// merge instead. New sets it for FT_DECODE_CLUSTER=0 (A/B runs).
	NoDecodeCluster bool
	// DecodeClusterSplits forces the cluster twins' split count (2, 4 or
	// 8; 0: by the capacity, clusterFor). New sets it from
	// FT_DECODE_CLUSTER=2|4|8 (A/B runs).
	DecodeClusterSplits int
	// DecodeClusterPull takes the remote-load cluster twins
	// (decode_cluster_merge: two cluster barriers) instead of the
	// push-merge ones (decode_cluster_push; cluster.go). New sets it from
	// FT_DECODE_CLUSTER_PUSH=0 (A/B runs).
	DecodeClusterPull bool
	// QKNormRoPETokens is the most tokens for which NormRoPEStoreKV runs
	// (qknormrope.go: the q/k norms, RoPE and KV store as one kernel);
	// it declines larger calls, all of them at 0, none at −1. New sets it
	// from FT_QKNORM_ROPE: 1 unset or "1", 0 for "0", −1 for "all".
	QKNormRoPETokens int

	// NoMergedGEMM turns MatMulMerged and GateUpSiLUMerged off (they then
	// say they did not run): q, k, v and gate, up of a several-token
	// forward run as separate GEMMs. New sets it when FT_MERGED_GEMM=0
	// (A/B runs; merged.go).
	NoMergedGEMM bool
	merged       *runtime.DeviceBuffer // the merged GEMMs' scratch (merged.go)

	// SwiGLUGEMM lets GateUpSiLUFused run (gemmfused.go: gate, up and
	// silu·mul of a many-token forward as one wgmma GEMM of our own); off,
	// it declines. New sets it unless FT_SWIGLU_GEMM=0.
	SwiGLUGEMM bool
	// SwiGLUStore is how that GEMM's epilogue stores (gemmfusedmode.go);
	// New sets it from FT_SWIGLU_GEMM (regs; A/B runs).
	SwiGLUStore SwiGLUStore
	// QKVGEMM lets ProjectRoPEStoreRows run (qkvgemm.go: q, k, v, RoPE and
	// the KV-cache store of a many-token forward as one such GEMM); off,
	// it declines. New sets it when FT_QKV_GEMM=1.
	QKVGEMM bool
	// FusedGroup is how many row tiles make a group of the fused GEMMs'
	// tile order (GS_GM in kernels/cuda/sm90a/extra/gemm_fused.cu), read
	// when their module is first loaded; 0 keeps the file's 16. New sets
	// it from FT_FUSED_GROUP (A/B runs).
	FusedGroup int
	fusedGEMM  gemmFusedModule // their kernels (gemmfused.go)
	ropeCS     ropeCS          // the cos/sin table of gemm_qkv_rope_tma_bf16

	// NormTail lets MatMulAddNorm run (normtail.go: the one-token
	// residual-adding GEMV whose last block writes the RMSNorm after it);
	// off, it declines. New sets it when FT_NORM_TAIL=1 (A/B runs).
	NormTail bool
	// DecodeMega runs a plain layer's one-token step as one persistent
	// kernel (DecodeLayer, decodelayer.go). New sets it when
	// FT_DECODE_MEGA=1 (A/B runs); off by default.
	DecodeMega bool
	mega       megaState // the persistent layer kernel's barrier and partials

	tailCounter *runtime.DeviceBuffer // gemv_persist_f32acc_norm's last-block counter (normtail.go)

	// VarlenContig lets PackedPrefillAttention run (varlencontig.go: a
	// batched forward whose prefill sequences all start at position 0 reads
	// their keys and values from the packed rows of the forward, not the
	// paged pool); off, it declines. New sets it unless FT_VARLEN_CONTIG=0.
	VarlenContig bool

	// NormRows says when RMSNorm and AddRMSNorm of an F32 residual run
	// normrows.cu's many-rows kernels (same bits, normrows.go). New sets
	// it from FT_NORM_ROWS.
	NormRows NormRowsMode

	// MergedAll widens the token range of the merged GEMMs
	// (MergesAllTokens). New sets it from FT_MERGED_GEMM ("gateup", "qkv", "all").
	MergedAll MergedAllMode

	// ResidualNorm moves a large forward's attention residual add from the
	// o_proj GEMM's epilogue into the post-attention norm
	// (kernels.ResidualNormer, resacc.go). New sets it when
	// FT_PREFILL_RESACC=1.
	ResidualNorm bool

	// AsyncDecode switches device-fed greedy decoding on (FeedsTokens,
	// feed.go). New sets it unless FT_ASYNC_DECODE=0: on by default since
	// s14a (run-model 256 tokens 4.08 against 4.17 ms a token, same ids).
	AsyncDecode bool
	feed        feedState // argmax_feed's scratch, ring and events (feed.go)

	// GEMVEarly runs the one-token BF16 GEMVs' early-issue twins
	// (gemvearly.go): each warp's first weight loads before the
	// dependent-launch wait. New sets it unless FT_GEMV_EARLY=0 (on by
	// default since s15b).
	GEMVEarly bool
}

// stepIDs is the most token ids a captured step may take.
const stepIDs = 64

type kernelSet struct {
	add, addV8, addF32, addF32V4, silu, siluV8, embed, embedF32, store, cast, fill, argmax *cuda.Function
	addBias                                                                                *cuda.Function
	scale                                                                                  *cuda.Function // scale_bf16
	rms, rmsV8, rmsF32, rope, ropeStore                                                    *cuda.Function
	gemv, gemvF32                                                                          map[int]*cuda.Function // by unroll
	gemvPersist, gemvPersistF32, gemv3, gateUp                                             *cuda.Function
	attnSplit, attnCombine                                                                 *cuda.Function
	gemvFP8, dequantFP8                                                                    *cuda.Function         // FP8 weights (fp8.go)
	sample                                                                                 *cuda.Function         // device sampling (sample.go)
	argmaxFeed                                                                             *cuda.Function         // argmax_feed (feed.go)
	argmaxSplit                                                                            *cuda.Function         // argmax_rows_split (ArgmaxRows)
	exp4Unpack                                                                             *cuda.Function         // exp4_unpack (exp4.go)
	flash, attnDecode                                                                      map[int]*cuda.Function // by head width
	// persistBlocks is the grid of the persistent GEMV kernels: blocks of 256
	// threads resident at once on the whole GPU.
	persistBlocks map[*cuda.Function]int
	paged         pagedKernels    // over a paged KV cache (see the end of the file)
	moe           moeKernels      // mixture-of-experts row ops (moe.go)
	moeFused      moeFusedKernels // fused mixture-of-experts ops (moefused.go)
	decodeMMA     decodeMMAKernels
	addRMS        *cuda.Function                    // add_rmsnorm_f32_bf16 (addnorm.go)
	fp8           *fp8Kernels                       // FP8 GEMVs and dequantization at HBM speed (fp8gemv.go)
	rmsPair       *cuda.Function                    // rmsnorm_pair_bf16_v8 (qknorm.go)
	prefill       prefillKernels                    // prefill attention and vectorised RoPE + store (prefill.go)
	gemvAcc       *cuda.Function                    // gemv_persist_f32acc (matmuladd.go)
	gemvAccNorm   *cuda.Function                    // gemv_persist_f32acc_norm (normtail.go)
	fp8gemm       fp8GemmKernels                    // per-token quantization and rescaling (fp8gemm.go)
	norm          *normKernels                      // GEMVs with the RMSNorm folded in (normgemv.go)
	merged        mergedKernels                     // column splits after a merged GEMM (merged.go)
	qkvRoPE       *cuda.Function                    // gemv3_rope_store_bf16 (qkvrope.go)
	qkNormRoPE    *cuda.Function                    // qknorm_rope_store_bf16 (qknormrope.go)
	gemvPipe      gemvPipeKernels                   // pipelined twins of the one-token GEMVs (gemvpipe.go)
	gemvEarly     map[*cuda.Function]*cuda.Function // early-issue twins of gemv3_bf16 and the pipe GEMVs (gemvearly.go)
	decodeLayer   *megaModule                       // decode_layer_bf16's own module, loaded on first use (decodelayer.go)

	normRows normRowsKernels // many-rows RMSNorm (normrows.go)
	trace    *blockTrace     // FT_BLOCK_TRACE's records (blocktrace.go); nil: the kernels are not traced

	// loaded are the main module's functions, each once, in the order
	// they were looked up (TestDependentLaunchMatchesSources).
	loaded []*cuda.Function
}

var (
	modMu   sync.Mutex
	modules = map[*cuda.Device]*kernelSet{}
)

// kernelsFor compiles the kernels once per device.
func kernelsFor(dev *cuda.Device) (*kernelSet, error) {
	modMu.Lock()
	defer modMu.Unlock()
	if ks, ok := modules[dev]; ok {
		return ks, nil
	}
	var mod *cuda.Module
	var trace *blockTrace
	var err error
	if path := blockTraceFromEnv(); path != "" {
		mod, trace, err = loadTraced(dev, path)
	} else {
		mod, err = dev.LoadModule("flextensor_kernels.cu", kcuda.Source())
	}
	if err != nil {
		return nil, fmt.Errorf("cudabackend: compiling the kernels: %w", err)
	}
	var errs []error
	var loaded []*cuda.Function
	get := func(name string) *cuda.Function {
		f, err := mod.Function(name)
		errs = append(errs, err)
		if f != nil && !slices.Contains(loaded, f) {
			loaded = append(loaded, f)
		}
		return f
	}
	ks := &kernelSet{trace: trace,
		add: get("add_bf16"), addV8: get("add_bf16_v8"), addF32: get("add_f32"), addF32V4: get("add_f32_v4"),
		silu: get("silu_mul_bf16"), siluV8: get("silu_mul_bf16_v8"),
		embed: get("embedding_bf16"), embedF32: get("embedding_f32out"), store: get("store_rows_bf16"), cast: get("cast_any"),
		fill: get("fill_uniform_bf16"), argmax: get("argmax_rows"), argmaxFeed: get("argmax_feed"), argmaxSplit: get("argmax_rows_split"), exp4Unpack: get("exp4_unpack"),
		rms: get("rmsnorm_bf16"), rmsV8: get("rmsnorm_bf16_v8"), rmsF32: get("rmsnorm_f32in_bf16"),
		rope: get("rope_bf16"), ropeStore: get("rope_store_bf16"),
		gemv:      map[int]*cuda.Function{4: get("gemv_bf16_u4"), 8: get("gemv_bf16"), 16: get("gemv_bf16_u16")},
		gemvF32:   map[int]*cuda.Function{8: get("gemv_bf16_f32out"), 16: get("gemv_f32out_u16")},
		attnSplit: get("attn_split_bf16"), attnCombine: get("attn_combine_bf16"),
		flash:       map[int]*cuda.Function{32: get("attn_flash_d32_bf16"), 64: get("attn_flash_d64_bf16"), 128: get("attn_flash_d128_bf16")},
		attnDecode:  map[int]*cuda.Function{64: get("attn_decode_d64_bf16"), 128: get("attn_decode_d128_bf16")},
		gemvPersist: get("gemv_persist_bf16"), gemvPersistF32: get("gemv_persist_f32out"), gemv3: get("gemv3_bf16"),
		gateUp:  get("gemv_gateup_silu_bf16"),
		addBias: get("add_bias_bf16"), scale: get("scale_bf16"),
		gemvFP8: get("gemv_fp8"), dequantFP8: get("dequant_fp8_bf16"),
		sample: get("sample_rows"),
		paged:  loadPaged(get), moe: loadMoE(get), moeFused: loadMoEFused(get), decodeMMA: loadDecodeMMA(get),
		addRMS: get("add_rmsnorm_f32_bf16"), rmsPair: get("rmsnorm_pair_bf16_v8"), qkNormRoPE: get("qknorm_rope_store_bf16"),
		prefill: loadPrefill(get),
		gemvAcc: get("gemv_persist_f32acc"), gemvAccNorm: get("gemv_persist_f32acc_norm"),
		fp8:     loadFP8(get),
		fp8gemm: loadFP8Gemm(get),
		merged:  loadMerged(get),
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("cudabackend: %w", err)
	}
	ks.norm = loadNorm(get)
	ks.loadQKVRoPE(get)
	ks.normRows = loadNormRows(get)
	ks.loadGEMVPipe(get)
	ks.loadGEMVEarly(get)
	ks.decodeLayer = &megaModule{dev: dev}
	if decodeMegaFromEnv() && dev.ComputeCapability() == 90 {
		ks.decodeLayer.function() // now, not inside a later step (or a graph capture); an error waits for DecodeLayer
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("cudabackend: %w", err)
	}
	ks.loaded = loaded
	ks.allowDependentLaunch()
	ks.fp8.sms = dev.Multiprocessors()
	ks.fp8.cc = dev.ComputeCapability()
	ks.persistBlocks = map[*cuda.Function]int{}
	for _, f := range []*cuda.Function{ks.gemvPersist, ks.gemvPersistF32, ks.gemvAcc, ks.gemvAccNorm, ks.gemv3, ks.gateUp, ks.gemvFP8, ks.moeFused.gateUp, ks.moeFused.down} {
		n, err := f.MaxActiveBlocksPerSM(256, 0)
		if err != nil {
			return nil, fmt.Errorf("cudabackend: %w", err)
		}
		ks.persistBlocks[f] = max(1, n) * dev.Multiprocessors()
	}
	if err := ks.sizeQKVRoPE(dev.Multiprocessors()); err != nil {
		return nil, fmt.Errorf("cudabackend: %w", err)
	}
	if err := ks.sizeGEMVPipe(dev.Multiprocessors()); err != nil {
		return nil, fmt.Errorf("cudabackend: %w", err)
	}
	ks.prefill.allowSmem()
	ks.prefill.wg = newPrefillWGs(dev)
	if extra, ok := wantsPrefillWG(prefillVariantFromEnv()); ok {
		ks.prefill.wg[extra].load() // now, not inside a later launch (or a graph capture)
	}
	if err := ks.decodeMMA.sizeWave(dev.Multiprocessors()); err != nil {
		return nil, fmt.Errorf("cudabackend: %w", err)
	}
	modules[dev] = ks
	dev.AtClose(func() error {
		modMu.Lock()
		delete(modules, dev)
		modMu.Unlock()
		return nil
	})
	return ks, nil
}

// New returns the CUDA backend for dev (a device from cuda.Open), compiling
// the kernels with NVRTC on first use of the device (about a second).
func New(dev runtime.Device) (*Backend, error) {
	cd, ok := dev.(*cuda.Device)
	if !ok {
		return nil, fmt.Errorf("cudabackend: needs a cuda device, got %s (%T)", dev.Name(), dev)
	}
	fp8Mode, fp8MinTok, err := fp8GemmFromEnv()
	if err != nil {
		return nil, fmt.Errorf("cudabackend: %w", err)
	}
	fp8Variant, err := fp8VariantFromEnv()
	if err != nil {
		return nil, fmt.Errorf("cudabackend: %w", err)
	}
	gemmMode, err := gemmModeFromEnv()
	if err != nil {
		return nil, fmt.Errorf("cudabackend: %w", err)
	}
	noFusedRoPE, err := noFusedRoPEFromEnv()
	if err != nil {
		return nil, fmt.Errorf("cudabackend: %w", err)
	}
	normRows, err := normRowsFromEnv()
	if err != nil {
		return nil, fmt.Errorf("cudabackend: %w", err)
	}
	mergedAll, err := mergedAllFromEnv()
	if err != nil {
		return nil, fmt.Errorf("cudabackend: %w", err)
	}
	resAcc, err := resAccFromEnv()
	if err != nil {
		return nil, fmt.Errorf("cudabackend: %w", err)
	}
	noFP8Add, err := noFP8AddFromEnv()
	if err != nil {
		return nil, fmt.Errorf("cudabackend: %w", err)
	}
	gemv, err := gemvFromEnv()
	if err != nil {
		return nil, fmt.Errorf("cudabackend: %w", err)
	}
	if err := checkEnvSwitches(); err != nil {
		return nil, fmt.Errorf("cudabackend: %w", err)
	}
	if v := os.Getenv("FT_DECODE_VARIANT"); v != "" && !slices.Contains(PipeVariantNames(), v) {
		return nil, fmt.Errorf("cudabackend: FT_DECODE_VARIANT=%q: want one of %s (or unset)", v, quoteValues(PipeVariantNames()))
	}
	ks, err := kernelsFor(cd)
	if err != nil {
		return nil, err
	}
	blas, err := cd.NewBLAS()
	if err != nil {
		return nil, fmt.Errorf("cudabackend: %w", err)
	}
	blas.TuneSustained = gemmMode == GEMMTunedSustained
	aux, err := cd.NewCUDAStream("cudabackend uploads")
	if err != nil {
		return nil, fmt.Errorf("cudabackend: %w", err)
	}
	b := &Backend{dev: cd, s: cd.ComputeStream(), aux: aux, blas: blas, k: ks, sms: cd.Multiprocessors(),
		LegacyDecodeAttention: legacyDecodeFromEnv(), NoFusedAddNorm: noFusedAddNormFromEnv(), LegacyFlash: legacyFlashFromEnv(),
		LegacyFP8GEMV: legacyFP8FromEnv(), PrefillVariant: prefillVariantFromEnv(), FP8Variant: fp8Variant, NoFP8Add: noFP8Add,
		GEMVRowBlocks: gemv.RowBlocks, DecodeSplitPositions: envInt("FT_DECODE_SPLIT"),
		NoDecodePipe: os.Getenv("FT_DECODE_PIPE") == "0", DecodePipeChunk: envInt("FT_DECODE_CHUNK"),
		DecodePipeVariant: os.Getenv("FT_DECODE_VARIANT"), DecodePipeSplits: envInt("FT_DECODE_SPLITS"),
		FP8GEMM: fp8Mode, FP8GEMMMinTokens: fp8MinTok, FP8LtRescale: os.Getenv("FT_FP8_GEMM_SCALES") == "rescale",
		NoFP8Fuse:      os.Getenv("FT_FP8_FUSE") == "0",
		GEMM:           gemmMode,
		NoFusedNorm:    noFusedNormFromEnv(),
		NoFP8FusedNorm: noFP8FusedNormFromEnv(),
		FP8Persist:     os.Getenv("FT_FP8_PERSIST"),
		NoMergedGEMM:   noMergedFromEnv(),
		NormTail:       normTailFromEnv(),
		VarlenContig:   varlenContigFromEnv(),
		SwiGLUGEMM:     swigluGEMMFromEnv(),
		SwiGLUStore:    swigluStoreFromEnv(),
		QKVGEMM:        qkvGEMMFromEnv(),
		FusedGroup:     envInt("FT_FUSED_GROUP"),
		DecodeMega:     decodeMegaFromEnv(),
		AsyncDecode:    asyncDecodeFromEnv(),
		GEMVEarly:      gemvEarlyFromEnv()}
	b.NoFusedRoPE = noFusedRoPE
	b.NoDecodeCluster, b.DecodeClusterSplits, b.DecodeClusterPull = decodeClusterFromEnv()
	b.QKNormRoPETokens = qkNormRoPEFromEnv()
	b.NormRows, b.MergedAll, b.ResidualNorm = normRows, mergedAll, resAcc
	b.GEMVPipe, b.GEMVBal, b.GEMVPersistQKV = gemv.Pipe, gemv.Bal, gemv.PersistQKV
	cd.AtClose(b.Close)
	return b, nil
}

// Device is the GPU.
func (b *Backend) Device() runtime.Device { return b.dev }

// ActDType is BF16.
func (b *Backend) ActDType() runtime.DType { return runtime.BF16 }

// Close frees the backend's scratch memory (not the device, nor the cuBLAS
// handle and streams, which the device's Close destroys). The device's Close
// calls it; calling it earlier is fine too.
func (b *Backend) Close() error {
	err := b.s.Synchronize()
	for _, buf := range append(b.retired, b.step, b.ids, b.rope, b.part, b.argOut, b.argSplit, b.deq, b.counters, b.fp8lt.buf, b.tailCounter, b.ropeCS.buf) {
		buf.Free()
	}
	b.fp8lt.buf, b.merged, b.tailCounter, b.ropeCS = nil, nil, nil, ropeCS{} // b.merged is on b.retired
	b.retired, b.step, b.ids, b.rope, b.part, b.argOut, b.argSplit, b.deq, b.counters = nil, nil, nil, nil, nil, nil, nil, nil, nil
	b.meta.free()
	b.feed.free()
	b.mega.free()
	b.moe.free()
	b.sampleMeta.free()
	b.stage.Free()
	b.stage, b.stageEv = nil, nil
	return err
}

// check* validate tensors: on this device, of the dtype the kernels take.

func (b *Backend) onDevice(op, name string, t *runtime.Tensor) error {
	if t == nil {
		return fmt.Errorf("cudabackend.%s: %s is nil", op, name)
	}
	if t.Device() != runtime.Device(b.dev) {
		return fmt.Errorf("cudabackend.%s: %s %v is not on %s", op, name, t, b.dev.Name())
	}
	return nil
}

func (b *Backend) act(op, name string, t *runtime.Tensor) error {
	if err := b.onDevice(op, name, t); err != nil {
		return err
	}
	if t.DType() != runtime.BF16 {
		return fmt.Errorf("cudabackend.%s: %s is %v; the CUDA kernels take BF16 activations", op, name, t.DType())
	}
	return nil
}

// actOrF32 is act allowing F32 too (the fp32 residual stream).
func (b *Backend) actOrF32(op, name string, t *runtime.Tensor) error {
	if err := b.onDevice(op, name, t); err != nil {
		return err
	}
	if t.DType() != runtime.BF16 && t.DType() != runtime.F32 {
		return fmt.Errorf("cudabackend.%s: %s is %v; the CUDA kernels take BF16 (or F32) activations", op, name, t.DType())
	}
	return nil
}

func (b *Backend) weight(op, name string, t *runtime.Tensor) error {
	if err := b.onDevice(op, name, t); err != nil {
		return err
	}
	if t.DType() != runtime.BF16 {
		return fmt.Errorf("cudabackend.%s: %s %v has dtype %v; the CUDA kernels take BF16 weights (convert the checkpoint to bfloat16)",
			op, name, t.Shape(), t.DType())
	}
	return nil
}

func aligned16(ps ...uintptr) bool {
	for _, p := range ps {
		if p%16 != 0 {
			return false
		}
	}
	return true
}

// gridFor sizes a grid-stride launch of n items, 256 per block.
func (b *Backend) gridFor(n int64) int {
	blocks := (n + 255) / 256
	return int(max(1, min(blocks, int64(b.sms)*16)))
}

// posArgs are the (posp, pos0) kernel arguments: the step buffer while
// capturing, else the host position.
func (b *Backend) posArgs(pos0 int) (uint64, uint64) {
	if b.capturing {
		return cuda.Ptr(b.step.Ptr()), cuda.I32(pos0)
	}
	return 0, cuda.I32(pos0)
}

// MatMul: out[T,N] = x[T,D]·w[N,D]ᵀ, fp32 accumulation, out BF16 or F32.
func (b *Backend) MatMul(out, x, w *runtime.Tensor) error {
	if err := b.weight("MatMul", "w", w); err != nil {
		return err
	}
	if err := b.act("MatMul", "x", x); err != nil {
		return err
	}
	if err := b.onDevice("MatMul", "out", out); err != nil {
		return err
	}
	if out.DType() != runtime.BF16 && out.DType() != runtime.F32 {
		return fmt.Errorf("cudabackend.MatMul: out is %v, want BF16 or F32", out.DType())
	}
	ws := w.Shape()
	if len(ws) != 2 {
		return fmt.Errorf("cudabackend.MatMul: w %v, want [N,D]", ws)
	}
	N, D := ws[0], ws[1]
	if D == 0 || x.NumElements()%D != 0 {
		return fmt.Errorf("cudabackend.MatMul: x %v does not have rows of w's %d columns (w %v)", x.Shape(), D, ws)
	}
	T := x.NumElements() / D
	if out.NumElements() != T*N {
		return fmt.Errorf("cudabackend.MatMul: out %v, want %d×%d", out.Shape(), T, N)
	}
	if T == 0 || N == 0 {
		return nil
	}
	f32 := out.DType() == runtime.F32
	if T == 1 && D%8 == 0 && aligned16(x.Ptr(), w.Ptr()) && !b.GEMVRowBlocks {
		f := b.k.gemvPersist
		if f32 {
			f = b.k.gemvPersistF32
		}
		if ok, err := b.gemvBal(f, N, D, gemvBytes(N, D, out), cuda.Ptr(out.Ptr()), cuda.Ptr(x.Ptr()), cuda.Ptr(w.Ptr()), cuda.I32(N), cuda.I32(D)); ok {
			return err
		}
		f = b.gemvFn(f, D)
		return f.LaunchBytes(b.s, gemvBytes(N, D, out), cuda.Dim3{X: min(b.k.persistBlocks[f], (N+7)/8)}, cuda.Dim3{X: 256}, 0,
			cuda.Ptr(out.Ptr()), cuda.Ptr(x.Ptr()), cuda.Ptr(w.Ptr()), cuda.I32(N), cuda.I32(D))
	}
	if T == 1 && D%8 == 0 && aligned16(x.Ptr(), w.Ptr()) {
		wpr := b.GEMVWarpsPerRow
		if wpr == 0 {
			wpr = 1
			for wpr < 8 && (N+8/wpr-1)/(8/wpr) < 2*b.sms {
				wpr *= 2
			}
		}
		if wpr != 1 && wpr != 2 && wpr != 4 && wpr != 8 {
			return fmt.Errorf("cudabackend.MatMul: GEMVWarpsPerRow %d, want 1, 2, 4 or 8", wpr)
		}
		rpb := 8 / wpr
		fs := b.k.gemv
		u := b.GEMVUnroll
		if f32 {
			fs = b.k.gemvF32
			if u == 0 {
				u = 16
			}
		}
		if u == 0 {
			u = 8
		}
		f, ok := fs[u]
		if !ok {
			return fmt.Errorf("cudabackend.MatMul: no GEMV kernel with unroll %d for %v output", u, out.DType())
		}
		return f.LaunchBytes(b.s, gemvBytes(N, D, out), cuda.Dim3{X: (N + rpb - 1) / rpb}, cuda.Dim3{X: 256}, 0,
			cuda.Ptr(out.Ptr()), cuda.Ptr(x.Ptr()), cuda.Ptr(w.Ptr()), cuda.I32(N), cuda.I32(D), cuda.I32(wpr))
	}
	return b.gemm(out.Ptr(), !f32, x.Ptr(), w.Ptr(), T, N, D, false)
}

// RMSNorm: out[t,:] = x[t,:] / sqrt(mean(x[t,:]²) + eps) · w.
func (b *Backend) RMSNorm(out, x, w *runtime.Tensor, eps float32) error {
	if err := b.weight("RMSNorm", "w", w); err != nil {
		return err
	}
	if err := b.actOrF32("RMSNorm", "x", x); err != nil {
		return err
	}
	if err := b.act("RMSNorm", "out", out); err != nil {
		return err
	}
	dim := w.NumElements()
	if dim == 0 || x.Dim(-1) != dim || out.NumElements() != x.NumElements() {
		return fmt.Errorf("cudabackend.RMSNorm: x %v, w %v, out %v disagree", x.Shape(), w.Shape(), out.Shape())
	}
	rows := x.NumElements() / dim
	if rows == 0 {
		return nil
	}
	f, vec := b.k.rms, 1
	switch {
	case x.DType() == runtime.F32:
		if dim%4 != 0 || !aligned16(x.Ptr()) || out.Ptr()%4 != 0 || w.Ptr()%4 != 0 {
			return fmt.Errorf("cudabackend.RMSNorm: an F32 x needs rows of a multiple of 4 values, 16-byte aligned (x %v)", x.Shape())
		}
		if ot, threads, j, ok := normRows(b.NormRows, rows, dim); ok && out.Ptr()%8 == 0 && w.Ptr()%8 == 0 {
			bytes := int64(rows)*int64(dim)*(4+2) + int64(dim)*2
			return b.k.normRows.rms[j].LaunchBytes(b.s, bytes, cuda.Dim3{X: rows}, cuda.Dim3{X: threads}, 0,
				cuda.Ptr(out.Ptr()), cuda.Ptr(x.Ptr()), cuda.Ptr(w.Ptr()), cuda.I32(dim), cuda.F32(eps), cuda.I32(ot))
		}
		f, vec = b.k.rmsF32, 4
	case dim%8 == 0 && aligned16(out.Ptr(), x.Ptr(), w.Ptr()):
		f, vec = b.k.rmsV8, 8
	}
	threads := min(1024, max(32, (dim/vec+31)/32*32))
	bytes := int64(rows)*int64(dim)*int64(x.DType().Size()+out.DType().Size()) + int64(dim)*int64(w.DType().Size())
	return f.LaunchBytes(b.s, bytes, cuda.Dim3{X: rows}, cuda.Dim3{X: threads}, 0,
		cuda.Ptr(out.Ptr()), cuda.Ptr(x.Ptr()), cuda.Ptr(w.Ptr()), cuda.I32(dim), cuda.F32(eps))
}

// Embedding: out[t,:] = table[ids[t],:].
func (b *Backend) Embedding(out, table *runtime.Tensor, ids []int32) error {
	if err := b.weight("Embedding", "table", table); err != nil {
		return err
	}
	if err := b.actOrF32("Embedding", "out", out); err != nil {
		return err
	}
	ts := table.Shape()
	if len(ts) != 2 || out.NumElements() != len(ids)*ts[1] {
		return fmt.Errorf("cudabackend.Embedding: table %v, out %v for %d ids", ts, out.Shape(), len(ids))
	}
	for t, id := range ids {
		if id < 0 || int(id) >= ts[0] {
			return fmt.Errorf("cudabackend.Embedding: id %d at position %d is outside the vocabulary [0,%d)", id, t, ts[0])
		}
	}
	if len(ids) == 0 {
		return nil
	}
	var idp uintptr
	if b.capturing {
		if len(ids) > stepIDs {
			return fmt.Errorf("cudabackend.Embedding: a captured step takes at most %d ids, got %d", stepIDs, len(ids))
		}
		idp = b.step.Ptr() + 4
	} else {
		p, err := b.uploadIDs(ids)
		if err != nil {
			return err
		}
		idp = p
	}
	f := b.k.embed
	if out.DType() == runtime.F32 {
		f = b.k.embedF32
	}
	return f.Launch(b.s, cuda.Dim3{X: len(ids), Y: embedGridY(len(ids), ts[1], b.sms)}, cuda.Dim3{X: 256}, 0,
		cuda.Ptr(out.Ptr()), cuda.Ptr(table.Ptr()), cuda.Ptr(idp), cuda.I32(ts[1]), cuda.I32(ts[0]))
}

// embedGridY is the blocks a row of dim values of an embedding gather of T
// rows spreads over (256 threads each): up to one value a thread, while
// the grid stays within about two blocks a multiprocessor (sms). A decode
// step's one row of 4,096 took ~9 µs in one block (s27e's trace): its
// threads' 16 loads each waited in turn.
func embedGridY(T, dim, sms int) int {
	return max(1, min((dim+255)/256, 2*sms/max(T, 1)))
}

// uploadIDs copies ids to the device through pinned staging, in stream order.
func (b *Backend) uploadIDs(ids []int32) (uintptr, error) {
	n := int64(4 * len(ids))
	if b.stageEv != nil {
		if err := b.stageEv.Synchronize(); err != nil { // the last copy out of stage has run
			return 0, err
		}
	}
	if b.stage == nil || b.stage.Size() < n {
		b.stage.Free()
		b.stage = nil
		st, err := b.dev.AllocHost(max(n, 4096), "token id staging")
		if err != nil {
			return 0, err
		}
		b.stage = st
	}
	if b.ids == nil || b.ids.Size() < n {
		if b.ids != nil {
			b.retired = append(b.retired, b.ids)
		}
		buf, err := b.dev.Alloc(max(n, 4096), "token ids")
		if err != nil {
			b.ids = nil
			return 0, err
		}
		b.ids = buf
	}
	copy(b.stage.Bytes(), unsafe.Slice((*byte)(unsafe.Pointer(&ids[0])), n))
	if err := b.s.CopyH2D(b.ids, 0, b.stage, 0, n); err != nil {
		return 0, err
	}
	ev, err := b.s.RecordEvent()
	if err != nil {
		return 0, err
	}
	b.stageEv = ev
	return b.ids.Ptr(), nil
}

// ropeTable returns the device copy of invFreq, uploading it when it changed.
func (b *Backend) ropeTable(invFreq []float32) (uintptr, error) {
	if b.rope != nil && slices.Equal(b.ropeFor, invFreq) {
		return b.rope.Ptr(), nil
	}
	if len(invFreq) == 0 {
		return 0, errors.New("cudabackend.RoPE: empty inverse-frequency table")
	}
	if b.rope != nil {
		b.retired = append(b.retired, b.rope)
		b.rope = nil
	}
	buf, err := b.dev.Alloc(int64(4*len(invFreq)), "rope inverse frequencies")
	if err != nil {
		return 0, err
	}
	// Through the aux stream, synchronously: the compute stream may be
	// capturing, and the table must be there before anything reads it.
	if err := b.aux.Upload(buf.Ptr(), unsafe.Slice((*byte)(unsafe.Pointer(&invFreq[0])), 4*len(invFreq))); err != nil {
		buf.Free()
		return 0, err
	}
	b.rope, b.ropeFor = buf, slices.Clone(invFreq)
	return buf.Ptr(), nil
}

// ropeGridY spreads a token's work items over blocks of 256 threads.
func ropeGridY(items int) int { return max(1, (items+255)/256) }

// RoPE rotates x[T,H,d] in place; token t sits at position pos0+t.
func (b *Backend) RoPE(x *runtime.Tensor, pos0 int, invFreq []float32) error {
	if err := b.act("RoPE", "x", x); err != nil {
		return err
	}
	s := x.Shape()
	if len(s) != 3 || s[2]%2 != 0 || len(invFreq) != s[2]/2 {
		return fmt.Errorf("cudabackend.RoPE: x %v with %d frequencies, want [T,H,d] and d/2 frequencies", s, len(invFreq))
	}
	if s[0] == 0 {
		return nil
	}
	tab, err := b.ropeTable(invFreq)
	if err != nil {
		return err
	}
	posp, p0 := b.posArgs(pos0)
	return b.k.rope.Launch(b.s, cuda.Dim3{X: s[0], Y: ropeGridY(s[1] * s[2] / 2)}, cuda.Dim3{X: 256}, 0,
		cuda.Ptr(x.Ptr()), cuda.I32(s[1]), cuda.I32(s[2]), posp, p0, cuda.Ptr(tab))
}

func (b *Backend) kvFits(op string, cache, x *runtime.Tensor, pos0 int) error {
	cs, xs := cache.Shape(), x.Shape()
	if len(cs) != 3 || len(xs) != 3 || cs[1] != xs[1] || cs[2] != xs[2] {
		return fmt.Errorf("cudabackend.%s: x %v does not fit cache %v ([T,K,d] and [C,K,d])", op, xs, cs)
	}
	if pos0 < 0 || pos0+xs[0] > cs[0] {
		return fmt.Errorf("cudabackend.%s: %d rows at position %d exceed the cache capacity %d", op, xs[0], pos0, cs[0])
	}
	return nil
}

// StoreKV writes x[T,K,d] into cache[C,K,d] at rows pos0..pos0+T-1.
func (b *Backend) StoreKV(cache, x *runtime.Tensor, pos0 int) error {
	if err := b.act("StoreKV", "cache", cache); err != nil {
		return err
	}
	if err := b.act("StoreKV", "x", x); err != nil {
		return err
	}
	if err := b.kvFits("StoreKV", cache, x, pos0); err != nil {
		return err
	}
	T, row := x.Dim(0), x.Dim(1)*x.Dim(2)
	if T == 0 {
		return nil
	}
	posp, p0 := b.posArgs(pos0)
	return b.k.store.Launch(b.s, cuda.Dim3{X: T}, cuda.Dim3{X: 256}, 0,
		cuda.Ptr(cache.Ptr()), cuda.Ptr(x.Ptr()), cuda.I32(row), cuda.I32(cache.Dim(0)), posp, p0)
}

// RoPEStoreKV is RoPE(q), RoPE(k), StoreKV(kCache, k), StoreKV(vCache, v) in
// one kernel (kernels.RoPEStorer).
func (b *Backend) RoPEStoreKV(q, k, v, kCache, vCache *runtime.Tensor, pos0 int, invFreq []float32) error {
	for _, c := range []struct {
		n string
		t *runtime.Tensor
	}{{"q", q}, {"k", k}, {"v", v}, {"k cache", kCache}, {"v cache", vCache}} {
		if err := b.act("RoPEStoreKV", c.n, c.t); err != nil {
			return err
		}
	}
	qs, ks := q.Shape(), k.Shape()
	if len(qs) != 3 || !ks.Equal(v.Shape()) || !kCache.Shape().Equal(vCache.Shape()) || len(ks) != 3 || ks[0] != qs[0] || ks[2] != qs[2] ||
		qs[2]%2 != 0 || len(invFreq) != qs[2]/2 {
		return fmt.Errorf("cudabackend.RoPEStoreKV: q %v, k %v, v %v, caches %v/%v with %d frequencies disagree",
			qs, ks, v.Shape(), kCache.Shape(), vCache.Shape(), len(invFreq))
	}
	if err := b.kvFits("RoPEStoreKV", kCache, k, pos0); err != nil {
		return err
	}
	T, H, K, d := qs[0], qs[1], ks[1], qs[2]
	if T == 0 {
		return nil
	}
	tab, err := b.ropeTable(invFreq)
	if err != nil {
		return err
	}
	posp, p0 := b.posArgs(pos0)
	// One block a token: a decode step's single token runs faster spread
	// over the scalar kernel's blocks (0.150 against 0.209 ms a step on the
	// H200), so the vectorised kernel takes prefills only.
	if T >= 16 && b.ropeStoreV8(d, q.Ptr(), k.Ptr(), v.Ptr(), kCache.Ptr(), vCache.Ptr()) {
		return b.ropeStoreV8Launch(b.k.prefill.ropeStore, T, d,
			cuda.Ptr(q.Ptr()), cuda.Ptr(k.Ptr()), cuda.Ptr(v.Ptr()), cuda.Ptr(kCache.Ptr()), cuda.Ptr(vCache.Ptr()),
			cuda.I32(H), cuda.I32(K), cuda.I32(d), cuda.I32(kCache.Dim(0)), posp, p0, cuda.Ptr(tab))
	}
	return b.k.ropeStore.Launch(b.s, cuda.Dim3{X: T, Y: ropeGridY((H+K)*d/2 + K*d)}, cuda.Dim3{X: 256}, 0,
		cuda.Ptr(q.Ptr()), cuda.Ptr(k.Ptr()), cuda.Ptr(v.Ptr()), cuda.Ptr(kCache.Ptr()), cuda.Ptr(vCache.Ptr()),
		cuda.I32(H), cuda.I32(K), cuda.I32(d), cuda.I32(kCache.Dim(0)), posp, p0, cuda.Ptr(tab))
}

// splitsFor is the number of context splits of decode attention for a cache
// of capacity positions: about 64 positions a split, at most 64 splits. It
// depends on the capacity alone, so a captured graph holds at every position.
func splitsFor(capacity int) int { return min(64, max(1, (capacity+63)/64)) }

// Attention: causal GQA of q[T,H,d] (positions pos0..) over the caches' rows
// 0..pos0+T-1, written to out[T,H,d]. One token takes the split decode kernel
// and its combine; more take the flash kernel when d is 32, 64 or 128.
func (b *Backend) Attention(out, q, kCache, vCache *runtime.Tensor, pos0 int) error {
	return b.AttentionWindow(out, q, kCache, vCache, pos0, 0)
}

// AttentionWindow is Attention where the query at position P sees only
// positions max(0, P−window+1)..P; window 0 means all
// (kernels.WindowAttender).
func (b *Backend) AttentionWindow(out, q, kCache, vCache *runtime.Tensor, pos0, window int) error {
	if window < 0 {
		return fmt.Errorf("cudabackend.Attention: sliding window %d is negative (0 means none)", window)
	}
	for _, c := range []struct {
		n string
		t *runtime.Tensor
	}{{"out", out}, {"q", q}, {"k cache", kCache}, {"v cache", vCache}} {
		if err := b.act("Attention", c.n, c.t); err != nil {
			return err
		}
	}
	qs, cs := q.Shape(), kCache.Shape()
	if len(qs) != 3 || len(cs) != 3 || !cs.Equal(vCache.Shape()) || qs[2] != cs[2] || !out.Shape().Equal(qs) {
		return fmt.Errorf("cudabackend.Attention: q %v, out %v, caches %v / %v: want [T,H,d] and [C,K,d]", qs, out.Shape(), cs, vCache.Shape())
	}
	T, H, d, C, K := qs[0], qs[1], qs[2], cs[0], cs[1]
	if K == 0 || H%K != 0 {
		return fmt.Errorf("cudabackend.Attention: %d query heads are not a multiple of %d KV heads", H, K)
	}
	if pos0 < 0 || pos0+T > C {
		return fmt.Errorf("cudabackend.Attention: positions up to %d exceed cache capacity %d", pos0+T, C)
	}
	if T == 0 {
		return nil
	}
	scale := float32(math.Log2E / math.Sqrt(float64(d)))
	posp, p0 := b.posArgs(pos0)
	if T > 1 && !b.noFlash {
		if ok, err := b.flashAttention(out.Ptr(), q.Ptr(), kCache.Ptr(), vCache.Ptr(), T, H, K, d, posp, p0, scale, window); ok {
			return err
		}
	}
	G := H / K
	if d%8 != 0 || G > 16 || d > 1024 {
		return fmt.Errorf("cudabackend.Attention: head width %d (want a multiple of 8, at most 1024) or %d query heads per KV head (at most 16) not supported", d, G)
	}
	if f := b.decodeMMA(false, d, G, q.Ptr(), kCache.Ptr(), vCache.Ptr(), out.Ptr()); f != nil {
		kvBytes := 2 * int64(min(pos0+T, C)) * int64(K) * int64(d) * int64(kCache.DType().Size())
		return b.attentionMMA(f, out.Ptr(), q.Ptr(), kCache.Ptr(), vCache.Ptr(), T, H, K, d, C, pos0, window, kvBytes)
	}
	nsplit := 1
	if T == 1 {
		nsplit = splitsFor(C)
		if n := b.DecodeSplitPositions; n > 0 {
			nsplit = min(64, max(1, (C+n-1)/n))
		}
	}
	poBytes := int64(T) * int64(nsplit) * int64(H) * int64(d) * 4
	need := poBytes + int64(T)*int64(nsplit)*int64(H)*8
	if b.part == nil || b.part.Size() < need {
		if b.part != nil {
			b.retired = append(b.retired, b.part)
			b.part = nil
		}
		buf, err := b.dev.Alloc(max(need, 1<<20), "attention partials")
		if err != nil {
			return err
		}
		b.part = buf
	}
	po, pml := b.part.Ptr(), b.part.Ptr()+uintptr(poBytes)
	// The keys and values of positions [0, pos0+T) (or the window's), read
	// once per KV head; the partials written.
	kvBytes := 2*int64(min(pos0+T, C))*int64(K)*int64(d)*int64(kCache.DType().Size()) + poBytes
	if f, ok := b.k.attnDecode[d]; ok && !b.noFlash {
		if err := f.LaunchBytes(b.s, kvBytes, cuda.Dim3{X: K, Y: nsplit, Z: T}, cuda.Dim3{X: 128}, 0,
			cuda.Ptr(po), cuda.Ptr(pml), cuda.Ptr(q.Ptr()), cuda.Ptr(kCache.Ptr()), cuda.Ptr(vCache.Ptr()),
			cuda.I32(H), cuda.I32(K), cuda.I32(nsplit), posp, p0, cuda.F32(scale), cuda.I32(window)); err != nil {
			return err
		}
	} else {
		nt := max(128, (d+31)/32*32)
		smem := 4 * (G*d + G*nt + 3*G)
		if err := b.k.attnSplit.LaunchBytes(b.s, kvBytes, cuda.Dim3{X: K, Y: nsplit, Z: T}, cuda.Dim3{X: nt}, smem,
			cuda.Ptr(po), cuda.Ptr(pml), cuda.Ptr(q.Ptr()), cuda.Ptr(kCache.Ptr()), cuda.Ptr(vCache.Ptr()),
			cuda.I32(H), cuda.I32(K), cuda.I32(d), cuda.I32(nsplit), posp, p0, cuda.F32(scale), cuda.I32(window)); err != nil {
			return err
		}
	}
	return b.k.attnCombine.Launch(b.s, cuda.Dim3{X: H, Y: T}, cuda.Dim3{X: 128}, 0,
		cuda.Ptr(out.Ptr()), cuda.Ptr(po), cuda.Ptr(pml), cuda.I32(H), cuda.I32(d), cuda.I32(nsplit))
}

func (b *Backend) same3(op string, out, x, y *runtime.Tensor) (int64, error) {
	for _, c := range []struct {
		n string
		t *runtime.Tensor
	}{{"out", out}, {"a", x}, {"b", y}} {
		if err := b.act(op, c.n, c.t); err != nil {
			return 0, err
		}
	}
	if out.NumElements() != x.NumElements() || x.NumElements() != y.NumElements() {
		return 0, fmt.Errorf("cudabackend.%s: sizes %d, %d, %d differ", op, out.NumElements(), x.NumElements(), y.NumElements())
	}
	return int64(out.NumElements()), nil
}

func (b *Backend) elementwise(scalar, vec8 *cuda.Function, n int64, out, x, y *runtime.Tensor) error {
	if n == 0 {
		return nil
	}
	if n%8 == 0 && aligned16(out.Ptr(), x.Ptr(), y.Ptr()) {
		return vec8.Launch(b.s, cuda.Dim3{X: b.gridFor(n / 8)}, cuda.Dim3{X: 256}, 0,
			cuda.Ptr(out.Ptr()), cuda.Ptr(x.Ptr()), cuda.Ptr(y.Ptr()), cuda.I64(n/8))
	}
	return scalar.Launch(b.s, cuda.Dim3{X: b.gridFor(n)}, cuda.Dim3{X: 256}, 0,
		cuda.Ptr(out.Ptr()), cuda.Ptr(x.Ptr()), cuda.Ptr(y.Ptr()), cuda.I64(n))
}

// SiLUMul: out = silu(gate)·up elementwise.
func (b *Backend) SiLUMul(out, gate, up *runtime.Tensor) error {
	n, err := b.same3("SiLUMul", out, gate, up)
	if err != nil {
		return err
	}
	return b.elementwise(b.k.silu, b.k.siluV8, n, out, gate, up)
}

// Add: out = a + b elementwise, all BF16 or all F32 (the residual stream).
func (b *Backend) Add(out, x, y *runtime.Tensor) error {
	if out.DType() == runtime.F32 {
		for _, c := range []struct {
			n string
			t *runtime.Tensor
		}{{"out", out}, {"a", x}, {"b", y}} {
			if err := b.onDevice("Add", c.n, c.t); err != nil {
				return err
			}
			if c.t.DType() != runtime.F32 {
				return fmt.Errorf("cudabackend.Add: %s is %v, out F32: want all F32 or all BF16", c.n, c.t.DType())
			}
		}
		if out.NumElements() != x.NumElements() || x.NumElements() != y.NumElements() {
			return fmt.Errorf("cudabackend.Add: sizes %d, %d, %d differ", out.NumElements(), x.NumElements(), y.NumElements())
		}
		n := int64(out.NumElements())
		if n == 0 {
			return nil
		}
		if n%4 == 0 && aligned16(out.Ptr(), x.Ptr(), y.Ptr()) {
			return b.k.addF32V4.Launch(b.s, cuda.Dim3{X: b.gridFor(n / 4)}, cuda.Dim3{X: 256}, 0,
				cuda.Ptr(out.Ptr()), cuda.Ptr(x.Ptr()), cuda.Ptr(y.Ptr()), cuda.I64(n/4))
		}
		return b.k.addF32.Launch(b.s, cuda.Dim3{X: b.gridFor(n)}, cuda.Dim3{X: 256}, 0,
			cuda.Ptr(out.Ptr()), cuda.Ptr(x.Ptr()), cuda.Ptr(y.Ptr()), cuda.I64(n))
	}
	n, err := b.same3("Add", out, x, y)
	if err != nil {
		return err
	}
	return b.elementwise(b.k.add, b.k.addV8, n, out, x, y)
}

// AddBias: x[t,n] += bias[n] for BF16 x of rows as wide as the BF16 bias
// (kernels.BiasAdder).
func (b *Backend) AddBias(x, bias *runtime.Tensor) error {
	if err := b.act("AddBias", "x", x); err != nil {
		return err
	}
	if err := b.weight("AddBias", "bias", bias); err != nil {
		return err
	}
	N := bias.NumElements()
	if N == 0 || x.Dim(-1) != N {
		return fmt.Errorf("cudabackend.AddBias: x %v, bias %v: want rows as wide as the bias", x.Shape(), bias.Shape())
	}
	n := int64(x.NumElements())
	if n == 0 {
		return nil
	}
	return b.k.addBias.Launch(b.s, cuda.Dim3{X: b.gridFor(n)}, cuda.Dim3{X: 256}, 0,
		cuda.Ptr(x.Ptr()), cuda.Ptr(bias.Ptr()), cuda.I64(n), cuda.I32(N))
}

// Scale: x[i] *= s for BF16 x (kernels.Scaler).
func (b *Backend) Scale(x *runtime.Tensor, s float32) error {
	if err := b.act("Scale", "x", x); err != nil {
		return err
	}
	n := int64(x.NumElements())
	if n == 0 {
		return nil
	}
	return b.k.scale.Launch(b.s, cuda.Dim3{X: b.gridFor(n)}, cuda.Dim3{X: 256}, 0,
		cuda.Ptr(x.Ptr()), cuda.I64(n), cuda.F32(s))
}

// ReadF32 copies src (F32, BF16 or F16) to host float32 values once the work
// that produces it has run.
func (b *Backend) ReadF32(dst []float32, src *runtime.Tensor) error {
	if err := b.onDevice("ReadF32", "src", src); err != nil {
		return err
	}
	if len(dst) != src.NumElements() {
		return fmt.Errorf("cudabackend.ReadF32: dst holds %d values, src %v has %d", len(dst), src.Shape(), src.NumElements())
	}
	if len(dst) == 0 {
		return nil
	}
	switch src.DType() {
	case runtime.F32:
		return b.s.Download(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 4*len(dst)), src.Ptr())
	case runtime.BF16, runtime.F16:
		half := make([]uint16, len(dst))
		if err := b.s.Download(unsafe.Slice((*byte)(unsafe.Pointer(&half[0])), 2*len(half)), src.Ptr()); err != nil {
			return err
		}
		if src.DType() == runtime.BF16 {
			kernels.BF16ToF32(dst, half)
		} else {
			kernels.F16ToF32(dst, half)
		}
		return nil
	}
	return fmt.Errorf("cudabackend.ReadF32: dtype %v", src.DType())
}

// ReadBytes copies src's bytes to the host once the work that produces it
// has run.
func (b *Backend) ReadBytes(dst []byte, src *runtime.Tensor) error {
	if int64(len(dst)) != src.NumBytes() {
		return fmt.Errorf("cudabackend.ReadBytes: dst holds %d bytes, src %v has %d", len(dst), src, src.NumBytes())
	}
	return b.s.Download(dst, src.Ptr())
}

// WriteBytes copies host bytes into dst (synchronously, through the compute
// stream): for tests and small inputs.
func (b *Backend) WriteBytes(dst *runtime.Tensor, src []byte) error {
	if err := b.onDevice("WriteBytes", "dst", dst); err != nil {
		return err
	}
	if int64(len(src)) != dst.NumBytes() {
		return fmt.Errorf("cudabackend.WriteBytes: %d bytes for %v (%d bytes)", len(src), dst, dst.NumBytes())
	}
	return b.s.Upload(dst.Ptr(), src)
}

// Fill16 enqueues dst = the 16-bit pattern bits everywhere (tests poison
// outputs with 0x7fc0, a bf16 NaN).
func (b *Backend) Fill16(dst *runtime.Tensor, bits uint16) error {
	if dst.NumBytes()%2 != 0 {
		return fmt.Errorf("cudabackend.Fill16: %v is not a whole number of 16-bit words", dst)
	}
	return b.s.MemsetD16(dst.Ptr(), bits, dst.NumBytes()/2)
}

// Cast: out[i] = in[i] converted between F32, F16 and BF16 (round to nearest even).
func (b *Backend) Cast(out, in *runtime.Tensor) error {
	if err := b.onDevice("Cast", "out", out); err != nil {
		return err
	}
	if err := b.onDevice("Cast", "in", in); err != nil {
		return err
	}
	ok := func(d runtime.DType) bool { return d == runtime.F32 || d == runtime.F16 || d == runtime.BF16 }
	if !ok(out.DType()) || !ok(in.DType()) {
		return fmt.Errorf("cudabackend.Cast: %v to %v: the kernels cast between F32, F16 and BF16", in.DType(), out.DType())
	}
	if out.NumElements() != in.NumElements() {
		return fmt.Errorf("cudabackend.Cast: %v to %v: sizes differ", in, out)
	}
	n := int64(in.NumElements())
	if n == 0 {
		return nil
	}
	return b.k.cast.Launch(b.s, cuda.Dim3{X: b.gridFor(n)}, cuda.Dim3{X: 256}, 0,
		cuda.Ptr(out.Ptr()), cuda.I32(int(out.DType())), cuda.Ptr(in.Ptr()), cuda.I32(int(in.DType())), cuda.I64(n))
}

// FillUniform enqueues t = bf16 values uniform in [lo, hi) from seed (a BF16
// tensor; for benchmark weights made on the device).
func (b *Backend) FillUniform(t *runtime.Tensor, seed uint64, lo, hi float32) error {
	if err := b.act("FillUniform", "t", t); err != nil {
		return err
	}
	n := int64(t.NumElements())
	if n == 0 {
		return nil
	}
	return b.k.fill.Launch(b.s, cuda.Dim3{X: b.gridFor(n)}, cuda.Dim3{X: 256}, 0,
		cuda.Ptr(t.Ptr()), cuda.I64(n), seed, cuda.F32(lo), cuda.F32(hi))
}

// ArgmaxRows: dst[r] = the first index of the largest value of row r of
// x[R,V] (F32 or BF16), read back; −1 for a row with a NaN or +Inf, or only
// −Inf (kernels.Argmaxer).
func (b *Backend) ArgmaxRows(dst []int32, x *runtime.Tensor) error {
	if err := b.onDevice("ArgmaxRows", "x", x); err != nil {
		return err
	}
	if x.DType() != runtime.F32 && x.DType() != runtime.BF16 {
		return fmt.Errorf("cudabackend.ArgmaxRows: x is %v, want F32 or BF16", x.DType())
	}
	V := x.Dim(-1)
	if V == 0 || x.NumElements()/V != len(dst) {
		return fmt.Errorf("cudabackend.ArgmaxRows: x %v has %d rows, dst %d", x.Shape(), x.NumElements()/max(V, 1), len(dst))
	}
	if len(dst) == 0 {
		return nil
	}
	need := int64(4 * len(dst))
	if b.argOut == nil || b.argOut.Size() < need {
		if b.argOut != nil {
			b.retired = append(b.retired, b.argOut)
			b.argOut = nil
		}
		buf, err := b.dev.Alloc(max(need, 4096), "argmax results")
		if err != nil {
			return err
		}
		b.argOut = buf
	}
	if S, chunk := argmaxSplitGrid(len(dst), V); S > 0 {
		if err := b.argmaxSplit(len(dst), V, S, chunk, x); err != nil {
			return err
		}
	} else if err := b.k.argmax.Launch(b.s, cuda.Dim3{X: len(dst)}, cuda.Dim3{X: 1024}, 0,
		cuda.Ptr(b.argOut.Ptr()), cuda.Ptr(x.Ptr()), cuda.I32(int(x.DType())), cuda.I32(V)); err != nil {
		return err
	}
	return b.s.Download(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), need), b.argOut.Ptr())
}

// argmax_rows_split's shape: argmaxSplitThreads threads a block, each
// scanning about argmaxSplitRun elements of its block's chunk. argmax_rows
// gives a row one block of 1024 threads, whose ~125 loads a thread at a
// 128,256-token vocabulary took 54 µs on the H200 (FT_BLOCK_TRACE, s27c),
// as long as a fifth of a layer of the FP8 decode step.
const (
	argmaxSplitThreads = 256
	argmaxSplitRun     = 16
	argmaxSplitMaxRows = 65535 // grid.y
)

// argmaxSplitGrid is argmax_rows_split's blocks a row and elements a block
// for R rows of V elements; 0 blocks where a row is short enough for one
// block (argmax_rows) or the rows are more than a grid's y takes.
func argmaxSplitGrid(R, V int) (blocks, chunk int) {
	per := argmaxSplitThreads * argmaxSplitRun
	if V < 2*per || R > argmaxSplitMaxRows {
		return 0, 0
	}
	blocks = (V + per - 1) / per
	chunk = (V + blocks - 1) / blocks
	return (V + chunk - 1) / chunk, chunk
}

// argmaxSplit launches argmax_rows_split for R rows of x over S blocks of
// chunk elements a row into b.argOut: its scratch holds b.argRows counters
// (one a row; zeroed once, when the scratch is made, through the aux
// stream, as ensureCounters does: every launch leaves its counters zero
// and the partials never sit where a counter does, so nothing is zeroed
// between launches and a captured step holds no memset node between the
// LM head and this kernel) and then S partials a row.
func (b *Backend) argmaxSplit(R, V, S, chunk int, x *runtime.Tensor) error {
	parts := int64(R) * int64(S)
	if b.argSplit == nil || R > b.argRows || b.argSplit.Size() < 4*int64(b.argRows)+12*parts {
		rows := max(R, b.argRows)
		size := max(4*int64(rows)+12*parts, 4096)
		if b.argSplit != nil {
			b.retired = append(b.retired, b.argSplit)
			b.argSplit, b.argRows = nil, 0
		}
		buf, err := b.dev.Alloc(size, "argmax partials")
		if err != nil {
			return err
		}
		if err := b.aux.Upload(buf.Ptr(), make([]byte, size)); err != nil {
			buf.Free()
			return err
		}
		b.argSplit, b.argRows = buf, rows
	}
	p := b.argSplit.Ptr()
	q := p + uintptr(4*b.argRows)
	return b.k.argmaxSplit.Launch(b.s, cuda.Dim3{X: S, Y: R}, cuda.Dim3{X: argmaxSplitThreads}, 0,
		cuda.Ptr(b.argOut.Ptr()), cuda.Ptr(x.Ptr()), cuda.I32(int(x.DType())), cuda.I32(V), cuda.I32(chunk),
		cuda.Ptr(q), cuda.Ptr(q+uintptr(4*parts)), cuda.Ptr(q+uintptr(8*parts)), cuda.Ptr(p))
}

// ensureStep makes the step buffer (before any capture, so it never moves).
func (b *Backend) ensureStep() error {
	if b.step != nil {
		return nil
	}
	buf, err := b.dev.Alloc(4*(1+stepIDs), "graph step inputs")
	if err != nil {
		return err
	}
	b.step = buf
	return nil
}

// SetStep enqueues the next replay's token ids and first position into the
// step buffer (kernels.StepCapturer).
func (b *Backend) SetStep(ids []int32, pos0 int) error {
	if len(ids) == 0 || len(ids) > stepIDs {
		return fmt.Errorf("cudabackend.SetStep: %d ids, want 1..%d", len(ids), stepIDs)
	}
	if pos0 < 0 || pos0 > math.MaxInt32 {
		return fmt.Errorf("cudabackend.SetStep: position %d out of range", pos0)
	}
	if err := b.ensureStep(); err != nil {
		return err
	}
	b.feed.sets++
	if err := b.s.MemsetD32(b.step.Ptr(), uint32(pos0), 1); err != nil {
		return err
	}
	for i, id := range ids {
		if err := b.s.MemsetD32(b.step.Ptr()+uintptr(4*(i+1)), uint32(id), 1); err != nil {
			return err
		}
	}
	return nil
}

// CaptureStep records the work fn enqueues into a CUDA graph
// (kernels.StepCapturer). Ops whose inputs would change between steps read
// them from the step buffer; everything else (tensors, sizes) is fixed, so
// the graph must be replayed with the same buffers alive.
func (b *Backend) CaptureStep(fn func() error) (kernels.Graph, error) {
	if b.capturing {
		return nil, errors.New("cudabackend.CaptureStep: already capturing")
	}
	if err := b.ensureStep(); err != nil {
		return nil, err
	}
	if b.AsyncDecode {
		if err := b.ensureFeed(); err != nil { // before the capture: ArgmaxFeed's buffers never move
			return nil, err
		}
	}
	b.capturing, b.feed.captured = true, 0
	g, err := b.s.Capture(fn)
	b.capturing = false
	if err != nil {
		return nil, fmt.Errorf("cudabackend.CaptureStep: %w", err)
	}
	return &graph{g: g, b: b, feeds: b.feed.captured}, nil
}

// graph is a captured step (kernels.Graph): replayed on the backend's
// compute stream, where it was captured.
type graph struct {
	g     *cuda.Graph
	b     *Backend
	feeds int // the ArgmaxFeed launches the graph holds (feed.go counts them)
}

// Replay launches the graph once on the compute stream, after the feed has
// kept the picks its launches would overwrite.
func (g *graph) Replay() error {
	if g.feeds > 0 {
		if err := g.b.feed.harvest(uint64(g.feeds)); err != nil { // feed.go
			return err
		}
	}
	if err := g.g.Launch(g.b.s); err != nil {
		return err
	}
	g.b.feed.launched += uint64(g.feeds)
	return nil
}

// Close destroys the graph.
func (g *graph) Close() error { return g.g.Destroy() }

// Nodes is the number of operations in the graph.
func (g *graph) Nodes() int { return g.g.Nodes() }

// MatMulN: outs[i] = x·ws[i]ᵀ. Three BF16 projections of one token run as
// one GEMV launch; anything else runs as MatMuls (kernels.MultiMatMuler).
func (b *Backend) MatMulN(outs []*runtime.Tensor, x *runtime.Tensor, ws []*runtime.Tensor) error {
	if len(outs) != len(ws) {
		return fmt.Errorf("cudabackend.MatMulN: %d outputs for %d weights", len(outs), len(ws))
	}
	fused := len(ws) == 3
	if fused {
		if err := b.act("MatMulN", "x", x); err != nil {
			return err
		}
		D := x.Dim(-1)
		fused = x.NumElements() == D && D%8 == 0 && aligned16(x.Ptr())
		for i := range ws {
			if !fused {
				break
			}
			if err := b.weight("MatMulN", "w", ws[i]); err != nil {
				return err
			}
			if err := b.act("MatMulN", "out", outs[i]); err != nil {
				return err
			}
			fused = ws[i].Dim(-1) == D && len(ws[i].Shape()) == 2 && outs[i].NumElements() == ws[i].Dim(0) && aligned16(ws[i].Ptr())
		}
	}
	if !fused {
		for i := range ws {
			if err := b.MatMul(outs[i], x, ws[i]); err != nil {
				return err
			}
		}
		return nil
	}
	N0, N1, N2 := ws[0].Dim(0), ws[1].Dim(0), ws[2].Dim(0)
	if ok, err := b.gemvBal(b.k.gemv3, N0+N1+N2, x.Dim(-1), gemvBytes(N0+N1+N2, x.Dim(-1), outs[0]),
		cuda.Ptr(outs[0].Ptr()), cuda.Ptr(outs[1].Ptr()), cuda.Ptr(outs[2].Ptr()), cuda.Ptr(x.Ptr()),
		cuda.Ptr(ws[0].Ptr()), cuda.Ptr(ws[1].Ptr()), cuda.Ptr(ws[2].Ptr()), cuda.I32(N0), cuda.I32(N1), cuda.I32(N2), cuda.I32(x.Dim(-1))); ok {
		return err
	}
	f := b.gemvFn(b.k.gemv3, x.Dim(-1))
	return f.LaunchBytes(b.s, gemvBytes(N0+N1+N2, x.Dim(-1), outs[0]), cuda.Dim3{X: min(b.k.persistBlocks[f], (N0+N1+N2+7)/8)}, cuda.Dim3{X: 256}, 0,
		cuda.Ptr(outs[0].Ptr()), cuda.Ptr(outs[1].Ptr()), cuda.Ptr(outs[2].Ptr()), cuda.Ptr(x.Ptr()),
		cuda.Ptr(ws[0].Ptr()), cuda.Ptr(ws[1].Ptr()), cuda.Ptr(ws[2].Ptr()), cuda.I32(N0), cuda.I32(N1), cuda.I32(N2), cuda.I32(x.Dim(-1)))
}

// GateUpSiLU: out[1,I] = silu(x·wgᵀ)·(x·wuᵀ) for one token, one launch
// (kernels.GateUpSiLUer).
func (b *Backend) GateUpSiLU(out, x, wg, wu *runtime.Tensor) error {
	if err := b.act("GateUpSiLU", "x", x); err != nil {
		return err
	}
	if err := b.act("GateUpSiLU", "out", out); err != nil {
		return err
	}
	if err := b.weight("GateUpSiLU", "gate weight", wg); err != nil {
		return err
	}
	if err := b.weight("GateUpSiLU", "up weight", wu); err != nil {
		return err
	}
	D := x.Dim(-1)
	if x.NumElements() != D || !wg.Shape().Equal(wu.Shape()) || len(wg.Shape()) != 2 || wg.Dim(1) != D || out.NumElements() != wg.Dim(0) {
		return fmt.Errorf("cudabackend.GateUpSiLU: x %v, weights %v / %v, out %v: want one token of width D and [I,D] weights", x.Shape(), wg.Shape(), wu.Shape(), out.Shape())
	}
	if D%8 != 0 || !aligned16(x.Ptr(), wg.Ptr(), wu.Ptr()) {
		return fmt.Errorf("cudabackend.GateUpSiLU: width %d (want a multiple of 8) or unaligned tensors", D)
	}
	N := wg.Dim(0)
	if ok, err := b.gemvBal(b.k.gateUp, N, D, gemvBytes(2*N, D, out)-int64(N)*2,
		cuda.Ptr(out.Ptr()), cuda.Ptr(x.Ptr()), cuda.Ptr(wg.Ptr()), cuda.Ptr(wu.Ptr()), cuda.I32(N), cuda.I32(D)); ok {
		return err
	}
	f := b.gemvFn(b.k.gateUp, D)
	return f.LaunchBytes(b.s, gemvBytes(2*N, D, out)-int64(N)*2, cuda.Dim3{X: min(b.k.persistBlocks[f], (N+7)/8)}, cuda.Dim3{X: 256}, 0,
		cuda.Ptr(out.Ptr()), cuda.Ptr(x.Ptr()), cuda.Ptr(wg.Ptr()), cuda.Ptr(wu.Ptr()), cuda.I32(N), cuda.I32(D))
}

var (
	_ kernels.Backend       = (*Backend)(nil)
	_ kernels.StepCapturer  = (*Backend)(nil)
	_ kernels.RoPEStorer    = (*Backend)(nil)
	_ kernels.Argmaxer      = (*Backend)(nil)
	_ kernels.MultiMatMuler = (*Backend)(nil)
	_ kernels.GateUpSiLUer  = (*Backend)(nil)
)

// ---- Paged KV cache: batched decode and varlen prefill attention, batched
// RoPE + KV store (kernels.PagedDecodeAttender, kernels.VarlenPrefillAttender,
// kernels.BatchRoPEStorer); kernels in paged.cu and rope.cu. ----

// pagedKernels are the kernels over a paged KV cache.
type pagedKernels struct {
	split, ropeStore *cuda.Function
	decode, flash    map[int]*cuda.Function // by head width
}

// loadPaged looks the paged kernels up in the compiled module.
func loadPaged(get func(string) *cuda.Function) pagedKernels {
	return pagedKernels{
		split:     get("attn_paged_split_bf16"),
		ropeStore: get("rope_store_paged_bf16"),
		decode:    map[int]*cuda.Function{64: get("attn_paged_decode_d64_bf16"), 128: get("attn_paged_decode_d128_bf16")},
		flash: map[int]*cuda.Function{32: get("attn_varlen_flash_d32_bf16"), 64: get("attn_varlen_flash_d64_bf16"),
			128: get("attn_varlen_flash_d128_bf16")},
	}
}

// metaUpload is one kind of per-call int32 input (block tables, lengths,
// positions) on the device: uploaded through pinned staging in stream
// order, and reused while a call passes the same values (every layer of a
// forward does), so a batched forward uploads each kind once.
type metaUpload struct {
	vals  []int32 // what dev holds
	dev   *runtime.DeviceBuffer
	stage *runtime.HostBuffer
	ev    *cuda.Event // completes when the last copy from stage has run
}

// pagedMeta are the paged ops' uploads, one per op so that they do not
// evict each other within a forward (ropeQ: RoPEStoreKVAt of queries
// alone, a last layer's few rows, next to its keys' and values' call).
type pagedMeta struct{ rope, ropeQ, decode, prefill metaUpload }

func (m *pagedMeta) free() {
	for _, u := range []*metaUpload{&m.rope, &m.ropeQ, &m.decode, &m.prefill} {
		u.free()
	}
}

// free releases the upload's device and staging buffers.
func (m *metaUpload) free() {
	m.dev.Free()
	m.stage.Free()
	*m = metaUpload{}
}

// uploadRoPEPairs uploads the (position, cache row) pair of each packed
// row, the table the batched RoPE + store kernels read (ps[2t], ps[2t+1]);
// without slots (queries alone) the rows are 0 and the upload its own.
func (b *Backend) uploadRoPEPairs(positions, slots []int32) (uintptr, error) {
	ps := make([]int32, 2*len(positions))
	for t := range positions {
		ps[2*t] = positions[t]
		if slots != nil {
			ps[2*t+1] = slots[t]
		}
	}
	if slots == nil {
		return b.uploadMeta(&b.meta.ropeQ, ps, "batched rope positions of queries")
	}
	return b.uploadMeta(&b.meta.rope, ps, "batched rope positions")
}

// uploadMeta returns the device address of vals (not empty), uploading them
// unless m already holds them.
func (b *Backend) uploadMeta(m *metaUpload, vals []int32, label string) (uintptr, error) {
	if b.capturing {
		return 0, fmt.Errorf("cudabackend: %s: the paged ops upload per-call tables and cannot be captured into a step graph", label)
	}
	if m.dev != nil && slices.Equal(m.vals, vals) {
		return m.dev.Ptr(), nil
	}
	m.vals = m.vals[:0]
	n := int64(4 * len(vals))
	if m.ev != nil {
		if err := m.ev.Synchronize(); err != nil { // the last copy out of stage has run
			return 0, err
		}
	}
	if m.stage == nil || m.stage.Size() < n {
		m.stage.Free()
		m.stage = nil
		st, err := b.dev.AllocHost(max(n, 4096), label+" staging")
		if err != nil {
			return 0, err
		}
		m.stage = st
	}
	if m.dev == nil || m.dev.Size() < n {
		if m.dev != nil {
			b.retired = append(b.retired, m.dev)
		}
		buf, err := b.dev.Alloc(max(n, 4096), label)
		if err != nil {
			m.dev = nil
			return 0, err
		}
		m.dev = buf
	}
	copy(m.stage.Bytes(), unsafe.Slice((*byte)(unsafe.Pointer(&vals[0])), n))
	if err := b.s.CopyH2D(m.dev, 0, m.stage, 0, n); err != nil {
		return 0, err
	}
	ev, err := b.s.RecordEvent()
	if err != nil {
		return 0, err
	}
	m.ev = ev
	m.vals = append(m.vals, vals...)
	return m.dev.Ptr(), nil
}

// pagedShapes checks a paged attention's tensors: out and q [T,H,d], pools
// [P,K,d] (16-byte aligned), d % 8 == 0, 1 ≤ H/K ≤ 16.
func (b *Backend) pagedShapes(op string, out, q, kPool, vPool *runtime.Tensor, window int) (T, H, K, d int, err error) {
	if window < 0 {
		return 0, 0, 0, 0, fmt.Errorf("cudabackend.%s: sliding window %d is negative (0 means none)", op, window)
	}
	for _, c := range []struct {
		n string
		t *runtime.Tensor
	}{{"out", out}, {"q", q}, {"k pool", kPool}, {"v pool", vPool}} {
		if err := b.act(op, c.n, c.t); err != nil {
			return 0, 0, 0, 0, err
		}
	}
	qs, ps := q.Shape(), kPool.Shape()
	if len(qs) != 3 || len(ps) != 3 || !ps.Equal(vPool.Shape()) || qs[2] != ps[2] || !out.Shape().Equal(qs) {
		return 0, 0, 0, 0, fmt.Errorf("cudabackend.%s: q %v, out %v, pools %v / %v: want [T,H,d] and [P,K,d]", op, qs, out.Shape(), ps, vPool.Shape())
	}
	T, H, K, d = qs[0], qs[1], ps[1], qs[2]
	if K == 0 || H%K != 0 || H/K > 16 {
		return 0, 0, 0, 0, fmt.Errorf("cudabackend.%s: %d query heads for %d KV heads: want a multiple, at most 16 per KV head", op, H, K)
	}
	if d%8 != 0 || d > 1024 {
		return 0, 0, 0, 0, fmt.Errorf("cudabackend.%s: head width %d not supported (want a multiple of 8, at most 1024)", op, d)
	}
	if !aligned16(kPool.Ptr(), vPool.Ptr()) {
		return 0, 0, 0, 0, fmt.Errorf("cudabackend.%s: the pools are not 16-byte aligned", op)
	}
	return T, H, K, d, nil
}

// ensurePart makes the attention partials buffer at least need bytes.
func (b *Backend) ensurePart(need int64) error {
	if b.part != nil && b.part.Size() >= need {
		return nil
	}
	if b.part != nil {
		b.retired = append(b.retired, b.part)
		b.part = nil
	}
	buf, err := b.dev.Alloc(max(need, 1<<20), "attention partials")
	if err != nil {
		return err
	}
	b.part = buf
	return nil
}

// pagedSplitAttention runs the split kernels for query rows rows[2t],
// rows[2t+1] = (sequence, position) of q's row t over kv's block table, then
// attn_combine_bf16 into out. Splits: enough blocks for about four waves
// of the GPU, at most one per 64 visible positions (64 in all).
func (b *Backend) pagedSplitAttention(op string, m *metaUpload, out, q, kPool, vPool *runtime.Tensor, rows []int32,
	kv kernels.PagedKV, H, K, d, maxLen, window int) error {
	R := len(rows) / 2
	if R > 65535 {
		return fmt.Errorf("cudabackend.%s: %d query rows through the split kernel, at most 65535", op, R)
	}
	meta := make([]int32, 0, len(rows)+len(kv.BlockTable))
	meta = append(append(meta, rows...), kv.BlockTable...)
	base, err := b.uploadMeta(m, meta, "paged attention tables")
	if err != nil {
		return err
	}
	rowsP, tableP := base, base+uintptr(4*len(rows))
	span := maxLen
	if window > 0 {
		span = min(span, window)
	}
	if f := b.decodeMMA(true, d, H/K, q.Ptr(), out.Ptr()); f != nil {
		var visible int64 // positions read, for kernel profiles
		for t := range R {
			n := int64(rows[2*t+1]) + 1
			if window > 0 {
				n = min(n, int64(window))
			}
			visible += n
		}
		kvBytes := 2 * visible * int64(K) * int64(d) * int64(kPool.DType().Size())
		return b.pagedMMA(f, out.Ptr(), q.Ptr(), kPool.Ptr(), vPool.Ptr(), rowsP, tableP, R, H, K, d, span, kv.MaxBlocks, kv.BlockSize, window, kvBytes)
	}
	nsplit := max(1, min(splitsFor(span), (4*b.sms+K*R-1)/(K*R)))
	poBytes := int64(R) * int64(nsplit) * int64(H) * int64(d) * 4
	if err := b.ensurePart(poBytes + int64(R)*int64(nsplit)*int64(H)*8); err != nil {
		return err
	}
	po, pml := b.part.Ptr(), b.part.Ptr()+uintptr(poBytes)
	scale := float32(math.Log2E / math.Sqrt(float64(d)))
	if f, ok := b.k.paged.decode[d]; ok && !b.noFlash {
		if err := f.Launch(b.s, cuda.Dim3{X: K, Y: nsplit, Z: R}, cuda.Dim3{X: 128}, 0,
			cuda.Ptr(po), cuda.Ptr(pml), cuda.Ptr(q.Ptr()), cuda.Ptr(kPool.Ptr()), cuda.Ptr(vPool.Ptr()),
			cuda.I32(H), cuda.I32(K), cuda.I32(nsplit), cuda.Ptr(rowsP), cuda.Ptr(tableP), cuda.I32(kv.MaxBlocks), cuda.I32(kv.BlockSize),
			cuda.F32(scale), cuda.I32(window)); err != nil {
			return err
		}
	} else {
		G := H / K
		nt := max(128, (d+31)/32*32)
		smem := 4 * (G*d + G*nt + 3*G)
		if err := b.k.paged.split.Launch(b.s, cuda.Dim3{X: K, Y: nsplit, Z: R}, cuda.Dim3{X: nt}, smem,
			cuda.Ptr(po), cuda.Ptr(pml), cuda.Ptr(q.Ptr()), cuda.Ptr(kPool.Ptr()), cuda.Ptr(vPool.Ptr()),
			cuda.I32(H), cuda.I32(K), cuda.I32(d), cuda.I32(nsplit), cuda.Ptr(rowsP), cuda.Ptr(tableP), cuda.I32(kv.MaxBlocks),
			cuda.I32(kv.BlockSize), cuda.F32(scale), cuda.I32(window)); err != nil {
			return err
		}
	}
	return b.k.attnCombine.Launch(b.s, cuda.Dim3{X: H, Y: R}, cuda.Dim3{X: 128}, 0,
		cuda.Ptr(out.Ptr()), cuda.Ptr(po), cuda.Ptr(pml), cuda.I32(H), cuda.I32(d), cuda.I32(nsplit))
}

// PagedDecodeAttention is one query per sequence over the paged pools
// (kernels.PagedDecodeAttender): the split kernels (head widths 64 and 128
// stage keys and values through shared memory), each split walking its part
// of the sequence's block table, and the combine kernel.
func (b *Backend) PagedDecodeAttention(out, q, kPool, vPool *runtime.Tensor, kv kernels.PagedKV, window int) error {
	const op = "PagedDecodeAttention"
	T, H, K, d, err := b.pagedShapes(op, out, q, kPool, vPool, window)
	if err != nil {
		return err
	}
	N := len(kv.SeqLens)
	if T != N {
		return fmt.Errorf("cudabackend.%s: %d queries for %d sequences, want one each", op, T, N)
	}
	starts := make([]int32, N+1)
	for i := range starts {
		starts[i] = int32(i)
	}
	maxLen, err := kv.Check(starts, kPool.Dim(0))
	if err != nil {
		return fmt.Errorf("cudabackend.%s: %w", op, err)
	}
	if N == 0 {
		return nil
	}
	rows := make([]int32, 2*N)
	for s := range N {
		rows[2*s], rows[2*s+1] = int32(s), kv.SeqLens[s]-1
	}
	return b.pagedSplitAttention(op, &b.meta.decode, out, q, kPool, vPool, rows, kv, H, K, d, maxLen, window)
}

// VarlenPrefillAttention is causal attention of packed sequences over the
// paged pools (kernels.VarlenPrefillAttender): the tensor-core prefill
// kernel over every sequence's 128-query tiles (64 with LegacyFlash),
// longest first, for head widths 32, 64 and 128 (prefill.go), else the
// split kernels with one query row each.
func (b *Backend) VarlenPrefillAttention(out, q, kPool, vPool *runtime.Tensor, qStarts []int32, kv kernels.PagedKV, window int) error {
	const op = "VarlenPrefillAttention"
	T, H, K, d, err := b.pagedShapes(op, out, q, kPool, vPool, window)
	if err != nil {
		return err
	}
	maxLen, err := kv.Check(qStarts, kPool.Dim(0))
	if err != nil {
		return fmt.Errorf("cudabackend.%s: %w", op, err)
	}
	N := len(kv.SeqLens)
	if int(qStarts[N]) != T {
		return fmt.Errorf("cudabackend.%s: the query starts end at %d, q has %d rows", op, qStarts[N], T)
	}
	if T == 0 {
		return nil
	}
	if !b.noFlash {
		scale := float32(math.Log2E / math.Sqrt(float64(d)))
		if ok, err := b.varlenFlash(out.Ptr(), q.Ptr(), kPool.Ptr(), vPool.Ptr(), qStarts, kv, H, K, d, window, scale); ok {
			return err
		}
	}
	rows := make([]int32, 0, 2*T)
	for s := range N {
		n := qStarts[s+1] - qStarts[s]
		for j := range n {
			rows = append(rows, int32(s), kv.SeqLens[s]-n+j)
		}
	}
	return b.pagedSplitAttention(op, &b.meta.prefill, out, q, kPool, vPool, rows, kv, H, K, d, maxLen, window)
}

// RoPEStoreKVAt rotates each token at its own position and stores its key
// and value at its own pool row, one launch for the whole batch
// (kernels.BatchRoPEStorer).
func (b *Backend) RoPEStoreKVAt(q, k, v, kPool, vPool *runtime.Tensor, positions, slots []int32, invFreq []float32) error {
	T, H, K, d, err := kernels.CheckRoPEStoreAt(q, k, v, kPool, vPool, positions, slots, invFreq)
	if err != nil {
		return fmt.Errorf("cudabackend.%w", err)
	}
	ptrs := make([]uintptr, 5) // 0 for a half left out: H or K is 0 then, and the kernels do not touch it
	for i, c := range []struct {
		n string
		t *runtime.Tensor
	}{{"q", q}, {"k", k}, {"v", v}, {"k pool", kPool}, {"v pool", vPool}} {
		if c.t == nil {
			continue
		}
		if err := b.act("RoPEStoreKVAt", c.n, c.t); err != nil {
			return err
		}
		ptrs[i] = c.t.Ptr()
	}
	if T == 0 {
		return nil
	}
	if K == 0 {
		slots = nil
	}
	tab, err := b.ropeTable(invFreq)
	if err != nil {
		return err
	}
	p, err := b.uploadRoPEPairs(positions, slots)
	if err != nil {
		return err
	}
	args := []uint64{cuda.Ptr(ptrs[0]), cuda.Ptr(ptrs[1]), cuda.Ptr(ptrs[2]), cuda.Ptr(ptrs[3]), cuda.Ptr(ptrs[4]),
		cuda.I32(H), cuda.I32(K), cuda.I32(d), cuda.Ptr(p), cuda.Ptr(tab)}
	if b.ropeStoreV8(d, ptrs...) {
		return b.ropeStoreV8Launch(b.k.prefill.ropeStorePaged, T, d, args...)
	}
	return b.k.paged.ropeStore.Launch(b.s, cuda.Dim3{X: T, Y: ropeGridY((H+K)*d/2 + K*d)}, cuda.Dim3{X: 256}, 0, args...)
}

var (
	_ kernels.PagedDecodeAttender   = (*Backend)(nil)
	_ kernels.VarlenPrefillAttender = (*Backend)(nil)
	_ kernels.BatchRoPEStorer       = (*Backend)(nil)
)

// gemvBytes is what a one-token product with an [N,D] BF16 weight moves: the
// weight, the input row and the output row (for kernel profiles).
func gemvBytes(N, D int, out *runtime.Tensor) int64 {
	return int64(N)*int64(D)*2 + int64(D)*2 + int64(N)*int64(out.DType().Size())
}

// envInt is a non-negative integer from the environment variable name, else
// 0 (unset; New has rejected other values: checkEnvSwitches).
func envInt(name string) int {
	n, err := strconv.Atoi(os.Getenv(name))
	if err != nil || n < 0 {
		return 0
	}
	return n
}
