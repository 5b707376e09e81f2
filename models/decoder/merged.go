package decoder

import (
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// MergedMaxTokens is the most tokens for which a forward runs q, k, v (and
// gate, up) as one merged GEMM (kernels.MergedMatMuler): at more the
// separate GEMMs are compute-bound and gain nothing from the merge, which
// costs a scratch and a column split.
const MergedMaxTokens = 256

// merges reports whether the projections ls of h take the merged GEMM:
// 2..MergedMaxTokens rows (any count of 2 or more where the backend asks
// for it: kernels.MergedAllTokenser, gateUp saying which merge this is),
// plain weights, no hook watching them. Whether the weights are adjacent
// the backend checks at the call.
func merges(b kernels.Backend, h *runtime.Tensor, gateUp bool, ls ...*nn.Linear) bool {
	T := h.Dim(0)
	ms := make([]nn.Module, len(ls))
	for i, l := range ls {
		ms[i] = l
	}
	if T < 2 || !plain(ls...) || !nn.Unwatched(ms...) {
		return false
	}
	if T <= MergedMaxTokens {
		return true
	}
	f, ok := b.(kernels.MergedAllTokenser)
	return ok && f.MergesAllTokens(gateUp)
}

// traceOut receives the once-per-model count of merged layers (FT_TRACE=1:
// stderr; nil: not traced).
var traceOut io.Writer = func() io.Writer {
	if os.Getenv("FT_TRACE") == "1" {
		return os.Stderr
	}
	return nil
}()

// mergeTrace is what a model's layers answered to the merged GEMMs at
// their latest try, until it has been said once (under FT_TRACE=1).
type mergeTrace struct {
	mu         sync.Mutex
	ran        map[nn.Module]bool // by Attention or MLP
	saidQKV    bool
	saidGateUp bool
}

// noteMerged records whether mod (an Attention or a layer's MLP) ran its
// merged GEMM and, once every layer has tried, says how many did (once per
// model: "q/k/v merged: 32 of 32 layers"). Only under FT_TRACE=1.
func noteMerged(mod nn.Module, ran bool) {
	if traceOut == nil {
		return
	}
	m, ok := mod.Node().Tree().Root().(*Model)
	if !ok {
		return
	}
	t := &m.mergeTrace
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.saidQKV && t.saidGateUp {
		return
	}
	if t.ran == nil {
		t.ran = map[nn.Module]bool{}
	}
	t.ran[mod] = ran
	count := func(of func(l *Layer) nn.Module) (tried, merged, all int) {
		for _, l := range m.Layers {
			x := of(l)
			if x == nil {
				continue
			}
			all++
			if r, ok := t.ran[x]; ok {
				tried++
				if r {
					merged++
				}
			}
		}
		return tried, merged, all
	}
	if !t.saidQKV {
		if tried, merged, all := count(func(l *Layer) nn.Module { return l.Attn }); tried == all && all > 0 {
			fmt.Fprintf(traceOut, "decoder: q/k/v merged: %d of %d layers\n", merged, all)
			t.saidQKV = true
		}
	}
	if !t.saidGateUp {
		if tried, merged, all := count(func(l *Layer) nn.Module {
			if l.MLP == nil {
				return nil
			}
			return l.MLP
		}); tried == all && all > 0 {
			fmt.Fprintf(traceOut, "decoder: gate/up merged: %d of %d layers\n", merged, all)
			t.saidGateUp = true
		}
	}
}
