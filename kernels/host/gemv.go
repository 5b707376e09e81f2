package host

import (
	"fmt"
	"math"
	"os"
	goruntime "runtime"
	"strconv"
	"sync"
	"time"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/x448/float16"
)

// Options configure the host kernels.
type Options struct {
	// Threads is the number of goroutines the parallel kernels use (the
	// caller included); 0 means runtime.GOMAXPROCS(0).
	Threads int
	// Level is the instruction set; Auto picks the best this CPU supports
	// (Detect). Asking for one it does not support is an error.
	Level Level
	// SpinWait is how long an idle worker spins for the next job before it
	// parks (see Pool); 0 means the environment's FT_HOST_SPIN (a Go
	// duration, e.g. 20us; 0 never spins) or else the package's SpinWait
	// when the workers leave a core free (none when they take every core);
	// negative never spins. After a one-op decode layer (Pool.RunPhases)
	// the workers spin 50 µs for the next layer whatever the default, but
	// as set when it is set here or in FT_HOST_SPIN; the barrier between
	// the phases of one such layer always spins up to 50 µs before it
	// parks.
	SpinWait time.Duration
	// MaxChunkKiB caps the weight bytes one GEMV pool chunk covers, in KiB;
	// 0 means the environment's FT_HOST_CHUNK_KIB or else 512; negative
	// means no cap (about four chunks per thread whatever the matrix).
	MaxChunkKiB int
	// FusedLayer is how Backend.DecodeLayer runs a one-token decoder
	// layer as one op (kernels.DecodeLayerer): 1 as one pool job of five
	// phases, 2 as five pool jobs, −1 not at all (the decoder then runs
	// the layer's separate ops), 0 as the environment's FT_HOST_LAYER says
	// ("1" or unset: one job, "jobs": five, "0": off).
	FusedLayer int
	// PrefetchBytes, when positive, makes the one-token BF16 GEMV tile
	// prefetch each of its four rows that many bytes ahead of its loads
	// (software prefetch on top of the hardware's); 0 means the
	// environment's FT_HOST_PREFETCH or else DefaultPrefetchBytes;
	// negative none.
	PrefetchBytes int
	// AMXPasses is how the products of 16 tokens or more with a BF16
	// weight (or an FP8 E4M3 one with a scale a row) use the AMX tiles,
	// where the CPU has them (amx.go): the
	// passes over x's bf16 parts, 1 (x rounded to bf16, a GPU's product),
	// 2, or 3 (float32's precision); 0 means the environment's FT_HOST_AMX
	// (1, 2, 3 or off) or else DefaultAMXPasses; negative never.
	AMXPasses int
}

// DefaultPrefetchBytes is how far ahead the one-token BF16 GEMV tile
// prefetches each row when neither Options.PrefetchBytes nor
// FT_HOST_PREFETCH says (FT_HOST_PREFETCH=0: none). It was measured only
// on the H200 machine's host with the AVX-512 kernels, where it made one
// host layer 9-14% faster alone and the hybrid decode no slower
// (bench/RESULTS.md, s9b and s10c); AVX2 machines, whose BF16 tile
// prefetches too, get the same default unmeasured.
const DefaultPrefetchBytes = 1024

// Engine runs the host kernels: the SIMD GEMVs of this package over a
// persistent worker pool, or the pure-Go reference kernels of package
// kernels at Level Generic. An Engine is safe for concurrent use (its Runs
// are serialised); Close stops its workers.
type Engine struct {
	pool     *Pool
	level    Level
	k        *simd // nil at Generic
	maxChunk int   // bytes; 0: no cap
	prefetch int   // bytes the one-token BF16 tile prefetches ahead; 0: none
	amx      int   // passes of the AMX products; 0: none

	amxMu  sync.Mutex // the AMX products' packing buffer, job and FP8 panels
	amxBuf []uint16
	amxJob amxJob
	amxA   [][]uint16 // a worker's FP8 rows widened to bf16 (amxJob.panel)
}

// NewEngine starts an Engine with o's thread count and level.
func NewEngine(o Options) (*Engine, error) {
	if o.Threads < 0 {
		return nil, fmt.Errorf("host: %d threads: want 0 (all cores) or more", o.Threads)
	}
	l := o.Level
	if l == Auto {
		l = Detect()
	}
	if !hasLevel(l) {
		return nil, fmt.Errorf("host: level %v is not supported by this CPU (it supports %v)", l, Levels())
	}
	spin := o.SpinWait
	explicitSpin := spin != 0 || os.Getenv("FT_HOST_SPIN") != ""
	if spin == 0 {
		spin = SpinWait
		// Workers on every core: spinning takes the cores the rest of the
		// process needs (the offload engine's copies and launches). On the
		// H200 machine (16 cores, 16 threads, budget 0 + host) a step took
		// 128.6 ms with spinning workers and 117.0 without (2026-12-01).
		if t := o.Threads; t == 0 || t >= goruntime.NumCPU() {
			spin = 0
		}
		if v := os.Getenv("FT_HOST_SPIN"); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return nil, fmt.Errorf("host: FT_HOST_SPIN=%q: want a non-negative Go duration (0, 20us, 1ms)", v)
			}
			spin = d
		}
	}
	kib := o.MaxChunkKiB
	if kib == 0 {
		kib = maxChunkBytes >> 10
		if v := os.Getenv("FT_HOST_CHUNK_KIB"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, fmt.Errorf("host: FT_HOST_CHUNK_KIB=%q: want an integer (KiB; negative: no cap)", v)
			}
			kib = n
		}
	}
	k := simdSets[l]
	pf := o.PrefetchBytes
	if pf == 0 {
		pf = DefaultPrefetchBytes
		if v := os.Getenv("FT_HOST_PREFETCH"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("host: FT_HOST_PREFETCH=%q: want a non-negative byte distance (0: none)", v)
			}
			pf = n
		}
	}
	prefetch := 0
	if k != nil && pf > 0 && k.r4pfBF16 != nil {
		prefetch = pf
		kk := *k
		dist, f := uintptr(pf), k.r4pfBF16
		kk.r4BF16 = func(w *uint16, ld uintptr, x *float32, n int, out *[4]float32) { f(w, ld, x, n, out, dist) }
		k = &kk
	}
	amx, err := amxPasses(o.AMXPasses)
	if err != nil {
		return nil, err
	}
	if k == nil { // Generic: the reference kernels alone
		amx = 0
	}
	pool := newPool(o.Threads, max(spin, 0))
	if explicitSpin {
		pool.afterPhases = max(spin, 0)
	}
	return &Engine{pool: pool, level: l, k: k, maxChunk: max(kib, 0) << 10, prefetch: prefetch, amx: amx}, nil
}

// Level is the instruction set the Engine runs.
func (e *Engine) Level() Level { return e.level }

// Threads is the number of goroutines the Engine's parallel kernels use.
func (e *Engine) Threads() int { return e.pool.Threads() }

// Close stops the worker goroutines.
func (e *Engine) Close() { e.pool.Close() }

// weight is one GEMV operand: rows × cols in its stored dtype; FP8 E4M3
// carries its scales.
type weight struct {
	dt         runtime.DType // BF16, F16, F32 or F8E4M3
	half       []uint16
	f32        []float32
	q          []uint8
	scale      []float32 // F8E4M3: per row (block 0) or per block
	block      int
	rows, cols int
}

func fromMat(m kernels.Mat) weight {
	return weight{dt: m.DType, half: m.Half, f32: m.F32, rows: m.Rows, cols: m.Cols}
}

func fromQMat(m kernels.QMat) weight {
	return weight{dt: m.DType, q: m.Q, scale: m.Scale, block: m.Layout.Block, rows: m.Rows, cols: m.Cols}
}

func (w *weight) elemSize() int {
	switch w.dt {
	case runtime.F32:
		return 4
	case runtime.F8E4M3:
		return 1
	}
	return 2
}

// segment is one weight of a multi-GEMV and its output [T, rows] (row
// stride ldo).
type segment struct {
	w   weight
	out []float32
	ldo int
	acc bool // add into out (out += x·wᵀ) instead of writing it
}

// MatMul computes out[t,j] = Σ_c x[t,c]·w[j,c] for t < T (x [T,K], out
// [T,N] float32; w BF16, F16 or F32 [N,K]) with float32 accumulation, rows
// of w split over the pool. Results differ from kernels.MatMul by the
// summation order only (see the package doc for the tolerance); row j of
// token t has the same bits whatever the thread count and T, as long as T
// stays below 16 or (BF16 weights on a CPU with AMX: amx.go) at 16 or more.
func (e *Engine) MatMul(out, x []float32, T int, w kernels.Mat) error {
	if err := w.Validate(); err != nil {
		return fmt.Errorf("host.MatMul: w: %w", err)
	}
	if err := checkSizes("host.MatMul", out, x, T, w.Rows, w.Cols); err != nil {
		return err
	}
	if e.k == nil {
		return kernels.MatMul(out, x, T, w)
	}
	e.multi(x, T, []segment{{w: fromMat(w), out: out, ldo: w.Rows}})
	return nil
}

// MatMulQ is MatMul for an FP8 weight: out[t,j] = Σ_c x[t,c]·dequant(w)[j,c]
// with dequant(w)[j,c] = float32(q[j,c])·s(j,c) as kernels.QMat lays the
// scales out. E4M3 runs in SIMD (the codes widened in registers; NaN codes,
// which quantizers never write, read as ±480), or, for 16 tokens or more
// with a scale a row on a CPU with AMX, on the tiles (amx.go); E5M2 and
// Generic use kernels.MatMulQ.
func (e *Engine) MatMulQ(out, x []float32, T int, w kernels.QMat) error {
	if err := w.Validate(); err != nil {
		return fmt.Errorf("host.MatMulFP8: w: %w", err)
	}
	if err := checkSizes("host.MatMulFP8", out, x, T, w.Rows, w.Cols); err != nil {
		return err
	}
	if e.k == nil || w.DType != runtime.F8E4M3 {
		return kernels.MatMulQ(out, x, T, w)
	}
	e.multi(x, T, []segment{{w: fromQMat(w), out: out, ldo: w.Rows}})
	return nil
}

func checkSizes(op string, out, x []float32, T, n, k int) error {
	switch {
	case T < 0:
		return fmt.Errorf("%s: negative token count %d", op, T)
	case len(x) != T*k:
		return fmt.Errorf("%s: x has %d values, want T·K = %d·%d = %d", op, len(x), T, k, T*k)
	case len(out) != T*n:
		return fmt.Errorf("%s: out has %d values, want T·N = %d·%d = %d", op, len(out), T, n, T*n)
	}
	return nil
}

// targetChunkBytes is the least weight bytes one pool chunk covers: a few
// µs of streaming, so a hand-off is small next to its work.
const targetChunkBytes = 48 << 10

// maxChunkBytes is the most weight bytes one pool chunk covers by default
// (Options.MaxChunkKiB): about 50 µs of one core's streaming at 11 GB/s.
// Chunks are claimed dynamically, so a GEMV's threads finish within about
// one chunk of each other; with chunks a fixed share of the matrix (a
// quarter of a thread's part) the LM head's 1 GB came in 16 MB chunks, and
// its threads could idle for a millisecond at its end behind a late
// starter or a slower core. A claim is one atomic add; each chunk restarts
// the hardware prefetcher's four row streams, so chunks are not much
// smaller.
const maxChunkBytes = 512 << 10

// gemvChunk is the pool chunk, in quads (4-row groups), of a GEMV job over
// nq quads holding bytes of weights: about four chunks per thread, within
// [targetChunkBytes, maxChunkBytes] of weights.
func (e *Engine) gemvChunk(nq, bytes int) int {
	lo := max(1, targetChunkBytes*nq/bytes)
	c := e.pool.Chunk(nq, lo, 4)
	if e.maxChunk > 0 {
		c = min(c, max(lo, e.maxChunk*nq/bytes))
	}
	return c
}

// multi runs the GEMVs of segs over one x in one pool job: the quads (4-row
// groups) of every segment form one index range split over the workers.
func (e *Engine) multi(x []float32, T int, segs []segment) {
	if e.amxMulti(x, T, segs, nil) {
		return
	}
	ph := e.multiPhase(x, T, segs)
	e.pool.Run(ph.N, ph.Chunk, ph.Fn)
}

// multiPhase is multi's pool job as a Phase (N 0: nothing to do; a zero-
// width weight's outputs are cleared at once).
func (e *Engine) multiPhase(x []float32, T int, segs []segment) Phase {
	return e.multiPhaseIn(new(multiJob), x, T, segs)
}

// multiJob is a multiPhase job's state. A decode step's phases keep theirs
// from step to step (decodeState), so that the step allocates nothing; the
// job must not be reused before its Phase has run.
type multiJob struct {
	e      *Engine
	x      []float32
	T      int
	segs   []segment
	starts []int // first quad of each segment, and the total
	fn     func(worker, lo, hi int)
}

// multiPhaseIn is multiPhase keeping its state in j.
func (e *Engine) multiPhaseIn(j *multiJob, x []float32, T int, segs []segment) Phase {
	if T == 0 {
		return Phase{}
	}
	if j.fn == nil {
		j.fn = j.run
	}
	j.e, j.x, j.T, j.segs = e, x, T, segs
	j.starts = append(j.starts[:0], 0)
	var bytes, align int
	for i := range segs {
		s := &segs[i]
		if s.w.cols == 0 && !s.acc {
			for t := range T {
				clear(s.out[t*s.ldo : t*s.ldo+s.w.rows])
			}
		}
		j.starts = append(j.starts, j.starts[i]+(s.w.rows+3)/4)
		bytes += s.w.rows * s.w.cols * s.w.elemSize()
		if s.w.dt == runtime.F8E4M3 && s.w.block > 0 && s.w.block%4 == 0 {
			align = max(align, s.w.block/4)
		}
	}
	nq := j.starts[len(segs)]
	if nq == 0 || bytes == 0 {
		return Phase{}
	}
	chunk := e.gemvChunk(nq, bytes)
	if align > 0 {
		chunk = (chunk + align - 1) / align * align
	}
	return Phase{N: nq, Chunk: chunk, Fn: j.fn}
}

// run is the job's Fn: quads [lo,hi) of the segments.
func (j *multiJob) run(worker, lo, hi int) {
	starts := j.starts
	for i := range j.segs {
		a, b := max(lo, starts[i]), min(hi, starts[i+1])
		if a >= b {
			continue
		}
		s := &j.segs[i]
		if s.w.cols == 0 {
			continue
		}
		j0, j1 := 4*(a-starts[i]), min(4*(b-starts[i]), s.w.rows)
		j.e.rows(worker, s, j.x, j.T, j0, j1)
	}
}

// rows computes rows [j0,j1) of segment s for all T tokens.
func (e *Engine) rows(worker int, s *segment, x []float32, T, j0, j1 int) {
	w := &s.w
	switch w.dt {
	case runtime.BF16:
		dense(e.pool.tile(worker), e.k.lanes, w.half, e.k.r4BF16, e.k.t4BF16, e.k.r2t4BF16, bf16Val, 0, w.cols, x, T, w.cols, s.out, s.ldo, j0, j1, nil, 1, s.acc)
	case runtime.F16:
		dense(e.pool.tile(worker), e.k.lanes, w.half, e.k.r4F16, e.k.t4F16, e.k.r2t4F16, f16Val, 0, w.cols, x, T, w.cols, s.out, s.ldo, j0, j1, nil, 1, s.acc)
	case runtime.F32:
		dense(e.pool.tile(worker), e.k.lanes, w.f32, e.k.r4F32, e.k.t4F32, e.k.r2t4F32, f32Val, 0, w.cols, x, T, w.cols, s.out, s.ldo, j0, j1, nil, 1, s.acc)
	case runtime.F8E4M3:
		k := w.cols
		if w.block == 0 {
			// out = s_j·256·Σ (q/256)·x
			dense(e.pool.tile(worker), e.k.lanes, w.q, e.k.r4FP8, e.k.t4FP8, e.k.r2t4FP8, fp8Val, 0, k, x, T, k, s.out, s.ldo, j0, j1, w.scale, 256, s.acc)
			return
		}
		// Block scales: rows of one block-row share a scale row, so each
		// token's x is scaled once per block-row, x'[c] = x[c]·s[jb,c/B]·256,
		// and the block-row's rows are plain dots with x'.
		B := w.block
		sc := (k + B - 1) / B
		xs := e.pool.Scratch(worker, T*k)
		for a := j0; a < j1; {
			jb := a / B
			b := min(j1, (jb+1)*B)
			srow := w.scale[jb*sc : (jb+1)*sc]
			for t := range T {
				xt, dt := x[t*k:(t+1)*k], xs[t*k:(t+1)*k]
				for c0 := 0; c0 < k; c0 += B {
					f := srow[c0/B] * 256
					c1 := min(c0+B, k)
					for c := c0; c < c1; c++ {
						dt[c] = xt[c] * f
					}
				}
			}
			dense(e.pool.tile(worker), e.k.lanes, w.q, e.k.r4FP8, e.k.t4FP8, e.k.r2t4FP8, fp8Val, 0, k, xs, T, k, s.out, s.ldo, a, b, nil, 1, s.acc)
			a = b
		}
	}
}

func bf16Val(v uint16) float32 { return math.Float32frombits(uint32(v) << 16) }
func f16Val(v uint16) float32  { return float16.Frombits(v).Float32() }
func f32Val(v float32) float32 { return v }

// fp8Val is an E4M3 code as the SIMD tiles read it: its value / 256.
func fp8Val(v uint8) float32 { return runtime.F8E4M3ToF32(v) * (1.0 / 256) }

// dense computes out[t·ldo+j] = mul·rs[j]·Σ_{c<k} w[w0+j·ldw+c]·x[t,c]
// (rs nil: 1) for j in [j0,j1) and t < T: the first ⌊k/L⌋·L columns
// in the SIMD tiles (four rows per pass at T = 1, two rows × four tokens
// per pass otherwise, each token group sweeping the rows while they are in cache),
// the rest in Go.
//
// tile is the calling worker's buffer for the tiles' outputs (a local array
// would escape to the heap through the function values: an allocation per
// call).
func dense[E uint8 | uint16 | float32](tile *[12]float32, L int, w []E,
	r4 func(*E, uintptr, *float32, int, *[4]float32),
	t4 func(*E, *float32, *float32, *float32, *float32, int, *[4]float32),
	r2t4 func(*E, uintptr, *float32, *float32, *float32, *float32, int, *[8]float32),
	val func(E) float32,
	w0 int, ldw int, x []float32, T, k int, out []float32, ldo, j0, j1 int, rs []float32, mul float32, acc bool) {
	nv := k / L
	kv := nv * L
	var esz uintptr
	switch any(w).(type) {
	case []uint8:
		esz = 1
	case []uint16:
		esz = 2
	default:
		esz = 4
	}
	ld := uintptr(ldw) * esz
	w = w[w0:]
	tail := func(j, t int) float32 {
		var s float32
		wr, xr := w[j*ldw:j*ldw+k], x[t*k:(t+1)*k]
		for c := kv; c < k; c++ {
			s += val(wr[c]) * xr[c]
		}
		return s
	}
	fin := func(j int, v float32) float32 {
		v *= mul
		if rs != nil {
			v *= rs[j]
		}
		return v
	}
	put := func(i, j int, v float32) {
		if acc {
			out[i] += fin(j, v)
		} else {
			out[i] = fin(j, v)
		}
	}
	o := (*[4]float32)(tile[0:4])
	o8 := (*[8]float32)(tile[4:12])
	if T == 1 {
		j := j0
		for ; j+4 <= j1; j += 4 {
			r4(&w[j*ldw], ld, &x[0], nv, o)
			for r := range 4 {
				put(j+r, j+r, o[r]+tail(j+r, 0))
			}
		}
		for ; j < j1; j++ {
			t4(&w[j*ldw], &x[0], &x[0], &x[0], &x[0], nv, o)
			put(j, j, o[0]+tail(j, 0))
		}
		return
	}
	for tg := 0; tg < T; tg += 4 {
		nt := min(4, T-tg)
		var xp [4]*float32
		for i := range 4 {
			xp[i] = &x[(tg+min(i, nt-1))*k]
		}
		j := j0
		for ; j+2 <= j1; j += 2 {
			r2t4(&w[j*ldw], ld, xp[0], xp[1], xp[2], xp[3], nv, o8)
			for i := range nt {
				t := tg + i
				put(t*ldo+j, j, o8[i]+tail(j, t))
				put(t*ldo+j+1, j+1, o8[4+i]+tail(j+1, t))
			}
		}
		for ; j < j1; j++ {
			t4(&w[j*ldw], xp[0], xp[1], xp[2], xp[3], nv, o)
			for i := range nt {
				t := tg + i
				put(t*ldo+j, j, o[i]+tail(j, t))
			}
		}
	}
}
