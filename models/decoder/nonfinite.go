package decoder

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// ErrNonFinite is wrapped by Generate's error when the logits hold a NaN or
// +Inf: the weights or the activations are not finite. NonFiniteWeight on
// the checkpoint says which tensor, when it is a weight.
var ErrNonFinite = errors.New("the logits are not finite")

// NonFiniteWeight finds the first parameter of m, in forward order
// (embeddings, layer by layer, final norm, LM head), whose checkpoint tensor
// in ck holds a NaN or an infinity, and returns its name, the element's
// index and whether one was found. It reads the weights from the
// checkpoint files, wherever the model placed them.
func (m *Model) NonFiniteWeight(ck *loader.Checkpoint) (name string, index int64, found bool, err error) {
	seen := map[string]bool{}
	for _, p := range nn.Parameters(m) {
		n := p.Name()
		if seen[n] {
			continue
		}
		seen[n] = true
		info, err := ck.Info(n)
		if err != nil {
			return "", 0, false, err
		}
		data, err := ck.Bytes(n)
		if err != nil {
			return "", 0, false, err
		}
		if i := firstNonFinite(data, info.DType); i >= 0 {
			return n, i, true, nil
		}
	}
	return "", 0, false, nil
}

// firstNonFinite is the index of the first NaN or ±Inf element of data
// (float dtypes: all exponent bits set), or -1.
func firstNonFinite(data []byte, dt runtime.DType) int64 {
	switch dt {
	case runtime.BF16, runtime.F16:
		mask := uint16(0x7F80)
		if dt == runtime.F16 {
			mask = 0x7C00
		}
		for i := 0; i+1 < len(data); i += 2 {
			if binary.LittleEndian.Uint16(data[i:])&mask == mask {
				return int64(i / 2)
			}
		}
	case runtime.F32:
		for i := 0; i+3 < len(data); i += 4 {
			if binary.LittleEndian.Uint32(data[i:])&0x7F800000 == 0x7F800000 {
				return int64(i / 4)
			}
		}
	}
	return -1
}

// ExplainNonFinite turns an error wrapping ErrNonFinite into one naming the
// first checkpoint tensor holding a NaN or Inf, or saying that every weight
// is finite (an activation overflowed). Other errors pass through.
func (m *Model) ExplainNonFinite(err error, ck *loader.Checkpoint) error {
	if !errors.Is(err, ErrNonFinite) || ck == nil {
		return err
	}
	name, i, found, ferr := m.NonFiniteWeight(ck)
	switch {
	case ferr != nil:
		return fmt.Errorf("%w (looking for the cause: %v)", err, ferr)
	case found:
		return fmt.Errorf("%w: checkpoint %s: tensor %s holds a NaN or Inf (element %d)", err, ck.Dir(), name, i)
	}
	return fmt.Errorf("%w, though every weight in %s is finite: an activation overflowed", err, ck.Dir())
}
