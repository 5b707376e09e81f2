// Helpers shared by FlexTensor's CUDA kernels. The .cu files of this
// directory are compiled as one NVRTC program, this file first (see
// Source in embed.go), except decodelayer.cu, compiled after this file as
// a program of its own (SourceDecodeLayer); they include no headers.
//
// Storage types: bf16_t and f16_t are the raw 16-bit patterns. Every kernel
// computes in fp32 and rounds to bf16 with round-to-nearest-even, exactly as
// runtime.F32ToBF16 does.

typedef unsigned short bf16_t;
typedef unsigned short f16_t;
typedef unsigned long long usize; // element offsets (NVRTC has no <stddef.h>)

#define FT_INF __int_as_float(0x7f800000)
#define FT_FULL 0xffffffffu
#define FT_BF16_NAN ((bf16_t)0x7fc0)

// bf2f widens bfloat16 bits: the high half of a binary32.
__device__ __forceinline__ float bf2f(bf16_t x) { return __uint_as_float(((unsigned)x) << 16); }

// f2bf narrows to bfloat16 with round-to-nearest-even; NaN stays a quiet NaN.
__device__ __forceinline__ bf16_t f2bf(float f) {
	unsigned u = __float_as_uint(f);
	if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_t)((u >> 16) | 0x40u);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (bf16_t)(u >> 16);
}

// rope_rotate rotates the pair (a, b) by θ = float(p)·f (cos and sin in
// fp32, full range reduction: within an ulp of the double-precision values
// the CPU rounds) and rounds it to bf16: r0 = a·cosθ − b·sinθ,
// r1 = b·cosθ + a·sinθ, each product and sum rounded as written (no
// contraction). rope.cu's rope_pair, the q/k/v GEMV with RoPE in its epilogue
// (rope_qkv.cu) and the one-kernel decode layer (decodelayer.cu, a unit of
// its own) share it, so they give the same bits.
__device__ __forceinline__ void rope_rotate(float a, float b, int p, float f, bf16_t& r0, bf16_t& r1) {
	const float th = __fmul_rn((float)p, f);
	float s, c;
	sincosf(th, &s, &c);
	r0 = f2bf(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)));
	r1 = f2bf(__fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s)));
}

// h2f widens IEEE binary16 bits.
__device__ __forceinline__ float h2f(f16_t h) {
	float f;
	asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
	return f;
}

// f2h narrows to IEEE binary16 with round-to-nearest-even.
__device__ __forceinline__ f16_t f2h(float f) {
	f16_t h;
	asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
	return h;
}

// pack_bf16 rounds lo and hi to bfloat16 and packs them, lo in the low half.
__device__ __forceinline__ unsigned pack_bf16(float lo, float hi) {
	unsigned r;
	asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
	return r;
}

// Element codes of the runtime.DType values the kernels know.
#define FT_F32 1
#define FT_F16 2
#define FT_BF16 3

__device__ __forceinline__ float load_as_f32(const void* p, int dt, usize i) {
	if (dt == FT_F32) return ((const float*)p)[i];
	if (dt == FT_F16) return h2f(((const f16_t*)p)[i]);
	return bf2f(((const bf16_t*)p)[i]);
}

__device__ __forceinline__ void store_from_f32(void* p, int dt, usize i, float v) {
	if (dt == FT_F32) ((float*)p)[i] = v;
	else if (dt == FT_F16) ((f16_t*)p)[i] = f2h(v);
	else ((bf16_t*)p)[i] = f2bf(v);
}

// ft_pos is the position of a step's first token: read from device memory
// when posp is set (a captured graph replays at any position), else pos0.
__device__ __forceinline__ int ft_pos(const int* posp, int pos0) { return posp ? *posp : pos0; }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FT_FULL, v, o);
	return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FT_FULL, v, o));
	return v;
}

// block_sum returns the sum of v over the block (blockDim.x a multiple of 32)
// to every thread; sh holds 32 floats of shared memory.
__device__ __forceinline__ float block_sum(float v, float* sh) {
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = warp_sum(v);
	__syncthreads();
	if (lane == 0) sh[w] = v;
	__syncthreads();
	v = lane < nw ? sh[lane] : 0.f;
	return warp_sum(v);
}

// RMSNorm of the fp32 residual stream, in the one order and rounding that
// every kernel computing it uses (rmsnorm_f32in_bf16, add_rmsnorm_f32_bf16
// and the GEMVs that fold the norm in, gemv.cu), so that all give the same
// bits: rms_sq4 adds the squares of v's four values to s (explicit fp32
// roundings, no contraction left to the compiler), rms_scale is
// 1/sqrt(s/dim + eps) and rms_out the normalised value x·scale·w.
__device__ __forceinline__ float rms_sq4(float s, float4 v) {
	float q = __fmul_rn(v.x, v.x);
	q = __fmaf_rn(v.y, v.y, q);
	q = __fmaf_rn(v.z, v.z, q);
	q = __fmaf_rn(v.w, v.w, q);
	return __fadd_rn(s, q);
}

__device__ __forceinline__ float rms_scale(float s, int dim, float eps) { return rsqrtf(__fadd_rn(__fdiv_rn(s, (float)dim), eps)); }

__device__ __forceinline__ float rms_out(float x, float scale, float w) { return __fmul_rn(__fmul_rn(x, scale), w); }

// dot8 is the fp32 dot product of two vectors of 8 bf16 values.
__device__ __forceinline__ float dot8(uint4 a, uint4 b) {
	float s = 0.f;
	s += __uint_as_float(a.x << 16) * __uint_as_float(b.x << 16);
	s += __uint_as_float(a.x & 0xffff0000u) * __uint_as_float(b.x & 0xffff0000u);
	s += __uint_as_float(a.y << 16) * __uint_as_float(b.y << 16);
	s += __uint_as_float(a.y & 0xffff0000u) * __uint_as_float(b.y & 0xffff0000u);
	s += __uint_as_float(a.z << 16) * __uint_as_float(b.z << 16);
	s += __uint_as_float(a.z & 0xffff0000u) * __uint_as_float(b.z & 0xffff0000u);
	s += __uint_as_float(a.w << 16) * __uint_as_float(b.w << 16);
	s += __uint_as_float(a.w & 0xffff0000u) * __uint_as_float(b.w & 0xffff0000u);
	return s;
}

// unpack8 widens 8 bf16 values.
__device__ __forceinline__ void unpack8(uint4 a, float* f) {
	f[0] = __uint_as_float(a.x << 16);
	f[1] = __uint_as_float(a.x & 0xffff0000u);
	f[2] = __uint_as_float(a.y << 16);
	f[3] = __uint_as_float(a.y & 0xffff0000u);
	f[4] = __uint_as_float(a.z << 16);
	f[5] = __uint_as_float(a.z & 0xffff0000u);
	f[6] = __uint_as_float(a.w << 16);
	f[7] = __uint_as_float(a.w & 0xffff0000u);
}

// Shared-memory address of a generic pointer, for ldmatrix and cp.async.
__device__ __forceinline__ unsigned smem_u32(const void* p) {
	unsigned r;
	asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
	return r;
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(smem)), "l"(gmem) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

__device__ __forceinline__ void cp_async_wait1() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }

__device__ __forceinline__ void cp_async_wait0() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// ldmatrix_x4 loads four 8×8 b16 matrices; lanes 8i..8i+7 give the row
// addresses of matrix i, which lands in r_i (thread l gets row l/4, columns
// 2(l%4), 2(l%4)+1).
__device__ __forceinline__ void ldmatrix_x4(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3, const void* p) {
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		: "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(smem_u32(p)) : "memory");
}

// ldmatrix_x4_trans is ldmatrix_x4 of the transposed matrices.
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3, const void* p) {
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		: "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(smem_u32(p)) : "memory");
}

// mma_bf16: c[16×8] += a[16×16]·b[16×8] (bf16 in, fp32 accumulate), the
// m16n8k16 fragments of the PTX ISA: thread l holds a at rows l/4 and l/4+8,
// columns 2(l%4)+{0,1} and +8; b at rows 2(l%4)+{0,1} and +8, column l/4; c at
// rows l/4 and l/4+8, columns 2(l%4)+{0,1}.
__device__ __forceinline__ void mma_bf16(float* c, const unsigned* a, unsigned b0, unsigned b1) {
	asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
		: "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		: "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// prefetch_l2 asks for the 128-byte line at p in L2 (a hint: nothing is
// read into the thread, so it may come before ft_pdl_wait).
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// Programmatic dependent launch (sm_90; runtime/cuda/pdl.go). A kernel the
// backend launches with programmatic stream serialization may start while
// the kernel before it in the stream still runs. ft_pdl_wait blocks until
// that kernel has completed and its writes are visible, then lets the next
// kernel of the stream begin launching (its blocks take SM slots as ours
// free them, and run up to their own ft_pdl_wait). Every such kernel calls
// it, on every path, before it reads memory that a kernel still running
// ahead of it may write, or writes memory such a kernel may read or write;
// before sm_90 it is empty. Work that needs no such memory may come first:
// the early GEMV twins load weights (gemvearly.go), qknorm_rope_store its
// norm weights and RoPE table, decode_tr.cu's PRE variants the older KV
// rows and the position. Those rely on the order here: launch_dependents
// comes after the wait, so when a kernel's blocks start, every kernel but
// the one just ahead has completed. Do not move the trigger earlier.
//
// Block tracing (FT_BLOCK_TRACE, kernels/cudabackend/blocktrace.go): the
// backend compiles Traced(Source()) with -DFT_BLOCK_TRACE, which puts
// FT_TRACE_SCOPE(n) (n: the kernel's index in the source) first in every
// kernel's body. Thread 0 of each block then appends one record of eight
// words to its SM's region of ft_trace_buf (FT_TRACE_SMS regions of
// ft_trace_cap records, a counter each, so that the blocks of different
// SMs never contend for one) when it leaves the kernel: the kernel index |
// the SM << 16 | the block's linear index << 32, %gridid (one per launch),
// its start, the end of its ft_pdl_wait (0 if none), its end
// (%globaltimer, ns), the grid's block count, and marks 0 | 1 << 32 and
// 2 | 3 << 32: the ns after its start at which thread 0 passed
// FT_TRACE_MARK(k) last (0: not passed; the phases of a kernel that
// places them). Without the macro none of this is compiled.
#ifdef FT_BLOCK_TRACE
#define FT_TRACE_SMS 256
__device__ unsigned long long* ft_trace_buf;            // set by the host; null: no records
__device__ unsigned long long ft_trace_cap;             // records a region of ft_trace_buf holds
__device__ unsigned long long ft_trace_n[FT_TRACE_SMS]; // records asked for so far by each SM (may pass cap)
__shared__ unsigned long long ft_trace_t0;   // thread 0's start
__shared__ unsigned long long ft_trace_wait; // thread 0's end of ft_pdl_wait
__shared__ unsigned ft_trace_mark[4];         // thread 0's marks, ns after ft_trace_t0 (0: none)

__device__ __forceinline__ unsigned long long ft_now() {
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

// FtTraceScope<ID> keeps its times in shared memory, not registers, so
// that a kernel capped near its register limit does not spill for it.
template <unsigned ID>
struct FtTraceScope {
	__device__ FtTraceScope() {
		if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
			ft_trace_t0 = ft_now();
			ft_trace_wait = 0;
			ft_trace_mark[0] = ft_trace_mark[1] = ft_trace_mark[2] = ft_trace_mark[3] = 0;
		}
	}
	__device__ ~FtTraceScope() {
		if (threadIdx.x | threadIdx.y | threadIdx.z) return;
		unsigned long long* buf = ft_trace_buf;
		if (!buf) return;
		unsigned sm;
		unsigned long long grid;
		asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
		asm volatile("mov.u64 %0, %%gridid;" : "=l"(grid));
		sm %= FT_TRACE_SMS;
		const unsigned long long n = atomicAdd(&ft_trace_n[sm], 1ull);
		if (n >= ft_trace_cap) return;
		const unsigned long long blk = blockIdx.x + (unsigned long long)gridDim.x * (blockIdx.y + (unsigned long long)gridDim.y * blockIdx.z);
		unsigned long long* r = buf + 8 * (sm * ft_trace_cap + n);
		r[0] = (unsigned long long)(ID & 0xffffu) | ((unsigned long long)(sm & 0xffffu) << 16) | (blk << 32);
		r[1] = grid;
		r[2] = ft_trace_t0;
		r[3] = ft_trace_wait;
		r[4] = ft_now();
		r[5] = (unsigned long long)gridDim.x * gridDim.y * gridDim.z;
		r[6] = ft_trace_mark[0] | (unsigned long long)ft_trace_mark[1] << 32;
		r[7] = ft_trace_mark[2] | (unsigned long long)ft_trace_mark[3] << 32;
	}
};
#define FT_TRACE_SCOPE(i) FtTraceScope<i> ft_trace_scope_;
// FT_TRACE_MARK(k) (k 0..3) notes when thread 0 of the block passes it.
#define FT_TRACE_MARK(k)                                                                                                           \
	do {                                                                                                                           \
		if ((threadIdx.x | threadIdx.y | threadIdx.z) == 0) ft_trace_mark[k] = max(1u, (unsigned)(ft_now() - ft_trace_t0));         \
	} while (0)
#else
#define FT_TRACE_SCOPE(i)
#define FT_TRACE_MARK(k) \
	do {                 \
	} while (0)
#endif

__device__ __forceinline__ void ft_pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.wait;" ::: "memory");
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
#ifdef FT_BLOCK_TRACE
	if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) ft_trace_wait = ft_now();
#endif
}


// Software-pipelined GEMV loop shared by gemvpipe.cu (bfp_loop, BF16) and
// fp8gemvpipe.cu (fp8p_loop, FP8); their top comments say why the loop
// has this shape. A warp walks its output rows row0, row0 + step, … (< N)
// in nb batches a row (nb ≥ 1), a batch being U 16-byte weight chunks per
// lane of each of the R weight rows of an output row. It issues batch b+1
// (the next batch of the row, or batch 0 of its next row) before it
// computes batch b, into the other of two register buffers cur/nxt
// (uint4[U][R]). What differs between the two files is a policy object
// ops and two callables:
//   - ops.issue(a, wr, c0) loads the batch whose lane chunk is c0 (c0,
//     c0 + 32, …) of the weight rows wr into a;
//   - ops.compute(acc, a, wr, c0) adds that batch (loaded: a) to the
//     lane's R sums acc;
//   - rows(row, wr) puts the weight rows of output row into wr, of the
//     type W (BF16: const uint4*[R]; FP8: fp8p_rows<R>, which also holds
//     the scales);
//   - finish(row, acc, wr) takes the lane's R sums of row (it reduces and
//     stores; FP8 reads the row's scales from wr).
// ops carries what issue and compute read besides the batch (x, the
// number of chunks a row, FP8's scale layout).

// pipe_rows_copy sets the weight rows d to s: a plain assignment, or
// element by element for an array of row pointers.
template <class W>
__device__ __forceinline__ void pipe_rows_copy(W& d, const W& s) { d = s; }
template <class T, int R>
__device__ __forceinline__ void pipe_rows_copy(T (&d)[R], const T (&s)[R]) {
#pragma unroll
	for (int r = 0; r < R; r++) d[r] = s[r];
}

// pipe_step is one step of the pipelined loop: it issues the batch after
// (row, b) into nxt (the row's next batch, or batch 0 of row + step, whose
// weight rows rows() puts in wn), computes batch b of row from cur and,
// after the row's last batch, hands the sums to finish (which may read
// wr), zeroes them and moves wn into wr. nb batches per row; row and b
// advance; false once row is past N.
template <int R, int U, class W, class Ops, class Rows, class Finish>
__device__ __forceinline__ bool pipe_step(uint4 (&cur)[U][R], uint4 (&nxt)[U][R], W& wr, W& wn, float* acc,
		int& row, int& b, int step, int N, int nb, const Ops& ops, Rows rows, Finish finish) {
	const int lane = threadIdx.x & 31;
	int rn = row, bn = b + 1;
	if (bn == nb) rn += step, bn = 0;
	if (rn < N) {
		if (bn == 0) {
			rows(rn, wn);
			ops.issue(nxt, wn, lane);
		} else {
			ops.issue(nxt, wr, lane + 32 * U * bn);
		}
	}
	ops.compute(acc, cur, wr, lane + 32 * U * b);
	if (bn == 0) {
		finish(row, acc, wr);
#pragma unroll
		for (int r = 0; r < R; r++) acc[r] = 0.f;
		pipe_rows_copy(wr, wn);
	}
	row = rn, b = bn;
	return row < N;
}

// pipe_run runs the pipelined loop from batch 0 of row, which the caller
// has issued into a0 (wr: its weight rows, acc zero, row < N), until the
// warp's rows are done. The loop is unrolled by two so the buffers a0 and
// a1 swap by name (a register copy would wait for the loads), and a
// batch's loads cross the loop's basic-block boundary, which ptxas does
// not sink them past.
template <int R, int U, class W, class Ops, class Rows, class Finish>
__device__ __forceinline__ void pipe_run(uint4 (&a0)[U][R], uint4 (&a1)[U][R], W& wr, W& wn, float* acc,
		int row, int step, int N, int nb, const Ops& ops, Rows rows, Finish finish) {
	int b = 0;
	while (pipe_step<R, U>(a0, a1, wr, wn, acc, row, b, step, N, nb, ops, rows, finish) &&
			pipe_step<R, U>(a1, a0, wr, wn, acc, row, b, step, N, nb, ops, rows, finish)) {
	}
}
