package kernels

import (
	"errors"

	"github.com/flextensor-go/flextensor/runtime"
)

// Optional capabilities of a Backend, found by type assertion. The CPU
// backend has none of them; the CUDA backend has all.

// Graph is backend work recorded once and replayed as one launch (a CUDA
// graph): every op with the tensors and sizes it was recorded with.
type Graph interface {
	// Replay enqueues the recorded work on the backend's compute stream.
	Replay() error
	// Close frees the graph.
	Close() error
}

// StepCapturer records a forward step into a Graph. While fn runs under
// CaptureStep, the ops that take token ids or positions (Embedding, RoPE,
// StoreKV, Attention, RoPEStoreKV) record reads of device memory that SetStep
// writes, so one graph replays at any position; the ids and positions passed
// while capturing only size the work. Nothing runs during the capture.
type StepCapturer interface {
	Backend
	// CaptureStep records the work fn enqueues.
	CaptureStep(fn func() error) (Graph, error)
	// SetStep enqueues, ahead of the next Replay, the step's token ids and the
	// position of its first token.
	SetStep(ids []int32, pos0 int) error
}

// RoPEStorer fuses a layer's rotary embedding with its KV-cache writes: the
// same as RoPE(q, pos0, invFreq); RoPE(k, pos0, invFreq); StoreKV(kCache, k,
// pos0); StoreKV(vCache, v, pos0), in one op.
type RoPEStorer interface {
	// RoPEStoreKV rotates q and k and stores k and v at rows pos0.. of the caches.
	RoPEStoreKV(q, k, v, kCache, vCache *runtime.Tensor, pos0 int, invFreq []float32) error
}

// Argmaxer picks greedy tokens on the device: dst[r] = the first index of the
// largest value of row r of x[R,V], read back to the host; −1 when the row
// holds a NaN or +Inf, or only −Inf (no greedy choice: read the row, as
// kernels.Sample does, to say which). Only R ints cross to the host instead
// of R×V logits.
type Argmaxer interface {
	// ArgmaxRows writes each row's greedy token (or −1) to dst.
	ArgmaxRows(dst []int32, x *runtime.Tensor) error
}

// DeviceSampler draws temperature samples on the device: dst[r] is drawn
// from row r of x[R,V] at inverse temperature invT[r] (> 0) with the uniform
// draw u[r] in [0,1), as kernels.Sample with neither top-k nor top-p walks
// the distribution (the first id whose running probability mass exceeds
// u·total), in float32; −1 when the row holds a NaN or +Inf, or only −Inf.
// Only R ints cross to the host.
type DeviceSampler interface {
	// SampleRows writes each row's drawn token (or −1) to dst.
	SampleRows(dst []int32, x *runtime.Tensor, invT, u []float32) error
}

// MultiMatMuler computes several projections of one input in one op:
// outs[i][T,N_i] = x[T,D]·ws[i][N_i,D]ᵀ (one launch for a token's q, k and v).
type MultiMatMuler interface {
	// MatMulN computes outs[i] = x·ws[i]ᵀ for every i in one op.
	MatMulN(outs []*runtime.Tensor, x *runtime.Tensor, ws []*runtime.Tensor) error
}

// GateUpSiLUer fuses Llama's MLP before its down projection for one token:
// out[1,I] = silu(x·wgᵀ)·(x·wuᵀ), silu(g) = g·σ(g), for x of one row.
type GateUpSiLUer interface {
	// GateUpSiLU computes out = silu(x·wgᵀ)·(x·wuᵀ) for x of one row.
	GateUpSiLU(out, x, wg, wu *runtime.Tensor) error
}

// ErrFedLost is wrapped by TokenFeeder.FedToken's error for a posted pick
// that the backend no longer holds (newer picks overwrote it): the step ran,
// and running it again from the same token, position and cache gives the
// same pick.
var ErrFedLost = errors.New("fed pick lost")

// TokenFeeder feeds a captured decode step's greedy token to the next step
// on the device (device-fed decoding): the step's graph ends with
// ArgmaxFeed, whose pick becomes the step buffer's token and whose position
// advances by one, so the next Replay (without SetStep) runs the chosen
// token at the next position while the host is still reading the previous
// one. The host learns each pick through PostFed and FedToken without a
// synchronous copy on the replay's path. decoder.Generate uses it for greedy
// decoding when FeedsTokens says so; a backend without it (the CPU backend)
// decodes one synchronous step at a time.
type TokenFeeder interface {
	StepCapturer
	// FeedsTokens reports whether device-fed decoding is switched on (the
	// CUDA backend: unless FT_ASYNC_DECODE=0).
	FeedsTokens() bool
	// ArgmaxFeed enqueues (records, under CaptureStep) the greedy pick of
	// the one-row logits x[1,V] (F32 or BF16): the first index of the
	// largest value, −1 for a row with a NaN or +Inf or only −Inf (as
	// Argmaxer). It writes the pick into the step buffer's token (0 for −1:
	// the step after a −1 must be discarded), adds one to its position and
	// keeps the pick for FedToken.
	ArgmaxFeed(x *runtime.Tensor) error
	// PostFed returns a ticket for the last ArgmaxFeed enqueued so far
	// (eagerly or by the Replay of a graph that holds it): call it right
	// after that Replay, before other work on the backend.
	PostFed() (uint64, error)
	// FedToken waits until the ArgmaxFeed of a ticket has run and returns
	// its pick (−1: no greedy choice; read the logits to say why). Each
	// ticket is read once; an unknown one is an error. A posted pick should
	// never be lost (the CUDA backend keeps a posted pick on the host before
	// newer launches could overwrite it), but a backend that no longer holds
	// it returns an error wrapping ErrFedLost: the step ran, so the caller
	// may run it again to get the same pick. FedToken waits for the work
	// enqueued up to the ticket (or, for a ticket it does not know, for all
	// work enqueued) before it returns, error or not, so a caller that reads
	// a ticket only to drain its step may free what the step used next.
	FedToken(ticket uint64) (int32, error)
	// StepSets counts the backend's SetStep calls: a caller that replays
	// without SetStep continues its own chain of fed steps only while the
	// count is the one after its own last SetStep (another caller's SetStep
	// moved the step buffer to that caller's token and position).
	StepSets() uint64
}
